"""The judge: a long-lived pytest process that runs the hidden checks against a worker it never touches.

Run as `python -m bertcourse.grading.judge FD` by the engine. It imports pytest (and, once, each check
module) and then runs one pytest session per notebook, with `JudgePlugin` providing the `student`
fixture (student.py), the `check` marker and result collection. Every `student.*` call becomes a
request to the engine, which relays it to the worker under the check's time and memory limits; replies
come back as data only. Scores are made only here, from the assertions of the check modules, which
import the helpers all exercises share (`_common.py` next to them) as `from _common import ...`.

A canary check that must fail runs in every session, with a nonce from the engine: if the engine does
not see it failed with that nonce, the checks did not really run and the grade is void.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
from _pytest.runner import runtestprotocol

from bertcourse.grading.exercises import SHARED_CHECK_HELPERS
from bertcourse.grading.protocol import Channel
from bertcourse.grading.student import Diagnosis, NotData, Student, StudentError, WorkerLost

CANARY_NAME = "check_bertcourse_canary"


# ----------------------------------------------------------------------------- the pytest plugin


class JudgePlugin:
    """Collects the marked checks, gives them `student`, and records one result per check."""

    def __init__(self, conn: Channel, first_command: dict[str, Any]):
        self.conn = conn
        self.module, self.mtime = first_command["module"], first_command.get("mtime")
        self.command: dict[str, Any] | None = first_command  # the next command to serve
        self.pending: dict[str, Any] | None = None  # a command this session cannot serve (another module)
        self.answered = False
        self.limits: dict[str, Any] = {}
        self.nonce = ""
        self.checks: dict[str, dict[str, Any]] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.problems: list[str] = []
        self.unavailable: str | None = None
        self.canary: str | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        """Declare the `check` marker (the judge runs with --strict-markers)."""
        config.addinivalue_line(
            "markers", "check(cell, points, feedback): a hidden check of the autograded cell `cell`, worth "
            "`points`, with one line of `feedback` shown when it fails")

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Record each check's marker (or its absence as a problem) and append the canary."""
        for item in items:
            marker = item.get_closest_marker("check")
            meta = dict(marker.kwargs) if marker else {}
            if marker is None or not isinstance(meta.get("cell"), str):
                self.problems.append(f"{item.nodeid}: no @pytest.mark.check(cell=..., points=..., feedback=...)")
            self.checks[item.nodeid] = {
                "name": item.name, "cell": str(meta.get("cell", "")), "points": float(meta.get("points", 1.0)),
                "feedback": str(meta.get("feedback", "")),
            }
        module = items[0].getparent(pytest.Module) if items else None
        if module is not None:
            # The canary joins the check module itself, so every conftest and hook that applies to
            # the checks applies to it too: whatever makes a check unable to fail makes it pass.
            canary = pytest.Function.from_parent(module, name=CANARY_NAME, callobj=_canary)
            items.append(canary)
            self.canary = canary.nodeid

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A check module that does not import is a problem of the course, reported to the engine."""
        if report.failed:
            self.problems.append(f"could not collect {report.nodeid}: {_short(report.longreprtext, 2000)}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Ask the engine for a worker ready for this check, and seed the judge's generators from its name."""
        self.unavailable = None
        if item.nodeid in self.checks:
            self.conn.send({"op": "begin_check", "name": item.name})
            reply, _ = self.conn.recv()
            self.unavailable = reply.get("unavailable")
        seed = zlib.crc32(item.name.encode())
        random.seed(seed)
        torch.manual_seed(seed)

    @pytest.fixture
    def student(self) -> Student:
        """The `student` fixture of every check."""
        return Student(self.conn, self.limits, self.unavailable)

    @pytest.fixture
    def bertcourse_canary_nonce(self) -> str:
        """What the canary check must fail with in this session."""
        return self.nonce

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        """Serve notebooks with the collected checks until a command needs another session.

        pytest starts once per check module (imports, collection, assertion rewriting: ~0.3 s);
        each notebook then only runs the items again with `runtestprotocol`."""
        while True:
            command, self.command = self.command, None
            if command is None:
                try:
                    command, _ = self.conn.recv()
                except (EOFError, OSError):
                    self.pending = {"op": "exit"}
                    return True
            op = command.get("op")
            if op not in ("collect", "run") or command.get("module") != self.module \
                    or command.get("mtime") != self.mtime:
                self.pending = command
                return True
            self.results = {}
            if op == "run":
                self.limits, self.nonce = command.get("limits", {}), str(command.get("nonce", ""))
                only = command.get("only")  # the checks the engine asks for; the canary always runs
                for item in session.items:
                    if only is None or item.name in only or item.nodeid == self.canary:
                        runtestprotocol(item, log=False, nextitem=None)
            self.answered = True
            self.conn.send(self.done(0))

    def done(self, exit_code: int) -> dict[str, Any]:
        """The `done` message: the collected checks, their results and the problems found."""
        checks = [{**meta, "nodeid": nodeid} for nodeid, meta in self.checks.items()]
        results = [{**result, "nodeid": nodeid, "canary": nodeid == self.canary}
                   for nodeid, result in self.results.items()]
        return {"op": "done", "exit_code": exit_code, "checks": checks, "results": results,
                "problems": self.problems}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        """Keep one result per check: its call, or the setup or teardown that failed or skipped it."""
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" or report.failed or report.skipped:
            if item.nodeid in self.results and report.when == "teardown" and not report.failed:
                return
            self.results[item.nodeid] = _result_of(item, call, report)


def _canary(bertcourse_canary_nonce: str) -> None:
    """Must fail, with the engine's nonce as its message (see the module docstring)."""
    assert not bertcourse_canary_nonce, bertcourse_canary_nonce


def _result_of(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> dict[str, Any]:
    passed = report.passed and report.when == "call"
    message = ""
    if report.skipped:
        message = "the check was skipped, so it counts as failed"
    elif not passed and call.excinfo is not None:
        message = _message(call.excinfo.value)
    hint = call.excinfo.value.hint if call.excinfo is not None and isinstance(call.excinfo.value, Diagnosis) else ""
    return {"name": item.name, "passed": passed, "message": message, "hint": _short(str(hint), 500),
            "detail": "" if passed else _short(report.longreprtext, 4000)}


BARE_ASSERT = "the result is not what was expected"  # a bare `assert x == y`: no reason (the report omits it)


def _message(exc: BaseException) -> str:
    """What a student may read: the reason, never the check's source or expected values."""
    if isinstance(exc, (StudentError, WorkerLost, NotData)):
        return str(exc)
    if isinstance(exc, Diagnosis):
        return "" if str(exc) == exc.hint else str(exc).split("\n", 1)[0].strip()  # the hint says it already
    if isinstance(exc, AssertionError):
        first = str(exc).split("\n", 1)[0].strip()
        return first if first and not first.startswith("assert ") else BARE_ASSERT
    return f"{type(exc).__name__}: {_short(str(exc).splitlines()[0] if str(exc) else '', 300)}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


# ----------------------------------------------------------------------------- running sessions


def run_session(plugin: JudgePlugin, work_dir: str) -> int:
    """One pytest session over the plugin's check module; it serves commands until it must end."""
    module = plugin.module
    ini = Path(work_dir) / "pytest.ini"
    if not ini.exists():
        # python_files stays narrow: assertion rewriting applies to modules matching it (never torch).
        ini.write_text("[pytest]\npython_files = test_*.py check_*.py\npython_functions = test_* check_*\n"
                       "python_classes = Test* Check*\n")
    helpers = Path(module).parent / SHARED_CHECK_HELPERS
    # What the modules this session imports are made of: the check module's version is the engine's (it
    # covers the shared helpers too, which the check module may have copied names from).
    versions = {Path(module): plugin.mtime, helpers: helpers.stat().st_mtime_ns if helpers.is_file() else None}
    _share_check_helpers(Path(module))
    for path, version in versions.items():
        _forget_stale_module(path, version)
    # Plugins a judge does not need; unraisableexception alone costs ~0.4 s per session (gc.collect). No plugin
    # installed in the environment is loaded (judge_main): hypothesis's imports all of hypothesis at the end of
    # every session (~2 s, the judge outliving its grader's close).
    skip = ["cacheprovider", "randomly", "xdist", "unraisableexception", "threadexception", "faulthandler",
            "pastebin", "junitxml", "doctest", "legacypath", "stepwise", "lfplugin", "nose", "setuponly",
            "setupplan"]
    args = [module, "-q", *(a for name in skip for a in ("-p", f"no:{name}")),
            "-c", str(ini), "--rootdir", str(Path(module).parent), "--strict-markers", "-o", "addopts=",
            "-W", "default"]
    exit_code = int(pytest.main(args, plugins=[plugin]))
    for path, version in versions.items():
        _stamp_module(path, version)
    return exit_code


def _share_check_helpers(module: Path) -> None:
    """Make the helpers shared by every exercise's checks (`_common.py` next to the check module)
    importable, as `from _common import ...`, whatever pytest's import mode."""
    if (module.parent / SHARED_CHECK_HELPERS).is_file() and str(module.parent) not in sys.path:
        sys.path.insert(0, str(module.parent))


def _loaded_from(path: Path) -> Any:
    """The imported module named like `path` when it was imported from `path`, else None."""
    loaded = sys.modules.get(path.stem)
    file = getattr(loaded, "__file__", None)
    return loaded if file is not None and Path(file).resolve() == path.resolve() else None


def _stamp_module(path: Path, version: int | None) -> None:
    """Remember which version of `path` the imported module is (the version read before importing it)."""
    loaded = _loaded_from(path)
    if loaded is not None:
        loaded.__bertcourse_version__ = version


def _forget_stale_module(path: Path, version: int | None) -> None:
    """Reuse an imported check module (or the shared helpers) across sessions only when it was imported
    from `path` at `version`; otherwise the session imports it again."""
    if path.stem not in sys.modules:
        return
    loaded = _loaded_from(path)
    if loaded is None or getattr(loaded, "__bertcourse_version__", None) != version:
        del sys.modules[path.stem]


def judge_main(fd: int) -> None:
    """Serve the engine's `collect` and `run` commands on socket `fd`, one pytest session per check module
    (torch is imported once, at the top of this module, not once per session by a check module)."""
    conn = Channel.from_fd(fd)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the checks need pytest alone (see run_session)
    work_dir = tempfile.mkdtemp(prefix="bertcourse-judge-")
    os.chdir(work_dir)
    command: dict[str, Any] | None = None
    while True:
        if command is None:
            try:
                command, _ = conn.recv()
            except (EOFError, OSError):
                return
        if command.get("op") not in ("collect", "run"):
            return  # exit, or a command this judge does not know
        plugin = JudgePlugin(conn, command)
        exit_code = run_session(plugin, work_dir)
        if not plugin.answered:  # pytest stopped before serving (a usage error): answer for it
            plugin.problems.append(f"pytest could not run {plugin.module} (exit code {exit_code}); see judge.log")
            conn.send(plugin.done(exit_code))
            command = None
        else:
            command = plugin.pending


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bertcourse.grading.judge FD  (started by the grading engine)")
    judge_main(int(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skips a slow interpreter shutdown with torch loaded
