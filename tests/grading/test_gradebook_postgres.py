"""A course team's shared gradebook: `autograde --db-url postgresql://...` records every grade in a real
PostgreSQL server (started here on a private Unix socket, no network)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from batch_support import EXERCISE, make_course, solution, submit, with_cells

from bertcourse.grading.batch.autograde import BatchOptions, autograde
from bertcourse.grading.batch.gradebook import open_gradebook


def _server_binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="module")
def postgres_url():
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
    run = lambda *args: subprocess.run(as_user + [str(a) for a in args], check=True, capture_output=True,  # noqa: E731
                                       text=True, timeout=120)
    run(binaries / "initdb", "-D", data, "-A", "trust", "-U", "grader")
    run(binaries / "pg_ctl", "-D", data, "-l", folder / "log", "-w", "-o",
        f"-k {folder} -c listen_addresses='' -c fsync=off", "start")
    try:
        run(binaries / "createdb", "-h", folder, "-U", "grader", "gradebook")
        yield f"postgresql+psycopg2://grader@/gradebook?host={folder}"
    finally:
        run(binaries / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_autograde_records_grades_in_postgresql(tmp_path, postgres_url):
    course = make_course(tmp_path / "course")
    submitted = course.root / "submitted"
    right = solution(course)
    submit(submitted, "alice", right)
    submit(submitted, "carol", with_cells(right, {"add": "def add(a, b):\n    return a - b\n"}))
    summary = autograde(course, BatchOptions(submitted, db_url=postgres_url, jobs=2, progress=False),
                        log=lambda _: None)
    assert summary.db_url == postgres_url
    with open_gradebook(postgres_url) as gradebook:
        assert gradebook.find_submission(EXERCISE, "alice").score == pytest.approx(3)
        assert gradebook.find_submission(EXERCISE, "carol").score == pytest.approx(1)
        assert gradebook.find_grade("add_checks", "add", EXERCISE, "carol").auto_score == 0
        assert sorted(s.id for s in gradebook.students) == ["alice", "carol"]
