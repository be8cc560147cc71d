"""Fixtures shared by the grading tests: the class batch, and one PostgreSQL server for the session."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from class_batch import grade_class


@pytest.fixture(scope="session")
def class_batch(tmp_path_factory):
    """The class of tests/support/class_batch.py graded once by `bertcourse autograde --jobs 2`; its tests only
    read what the batch wrote (test_autograde, test_feedback)."""
    return grade_class(tmp_path_factory.mktemp("batch") / "course")


def _server_binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on a private Unix socket (no network), started once: (folder, createdb command)."""
    binaries = _server_binaries()
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        binaries = None
    if binaries is None:
        reason = "PostgreSQL server binaries or psycopg2 not installed"
        if os.environ.get("BERTCOURSE_REQUIRE_POSTGRES"):
            pytest.fail(reason + " (BERTCOURSE_REQUIRE_POSTGRES is set)")
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="bcpg", dir="/tmp"))  # short: a socket path has ~100 characters
    as_user: list[str] = []
    if os.getuid() == 0:  # PostgreSQL refuses to run as root
        account = pwd.getpwnam("postgres")
        os.chown(folder, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"

    def run(*args):
        return subprocess.run(as_user + [str(a) for a in args], check=True, capture_output=True, text=True,
                              timeout=120)

    run(binaries / "initdb", "-D", data, "-A", "trust", "-U", "grader")
    run(binaries / "pg_ctl", "-D", data, "-l", folder / "log", "-w", "-o",
        f"-k {folder} -c listen_addresses='' -c fsync=off", "start")
    try:
        yield folder, lambda name: run(binaries / "createdb", "-h", folder, "-U", "grader", name)
    finally:
        run(binaries / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres_url(postgres_server, request):
    """A new, empty gradebook database for this test module on the session's server."""
    folder, createdb = postgres_server
    name = "gradebook_" + request.module.__name__.rsplit(".", 1)[-1].lower()
    createdb(name)
    return f"postgresql+psycopg2://grader@/{name}?host={folder}"
