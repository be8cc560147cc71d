"""The judge: a long-lived pytest process that runs the hidden checks against a worker it never touches.

Run as `python -m bertcourse.grading.judge FD` by the engine. It imports pytest (and, once, each check
module) and then runs one pytest session per notebook, with `JudgePlugin` providing the `student`
fixture, the `check` marker and result collection. Every `student.*` call becomes a request to the
engine, which relays it to the worker under the check's time and memory limits; replies are loaded
with `torch.load(weights_only=True)` and re-checked here, so student code can send data but never
objects or code. Scores are made only here, from the assertions of the check modules.

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

from bertcourse.grading.protocol import Channel, Remote, dump_values, load_values

CANARY_NAME = "check_bertcourse_canary"


class StudentError(Exception):
    """The student's code raised; the check fails with the student's exception type and message."""

    def __init__(self, type_name: str, message: str, student_traceback: str = ""):
        super().__init__(f"your code raised {type_name}: {message}")
        self.type_name = type_name
        self.student_message = message
        self.student_traceback = student_traceback


class StudentMissing(StudentError):
    """A name the check needs is not defined at the top level of the notebook."""

    def __init__(self, name: str):
        Exception.__init__(self, f"`{name}` is not defined")
        self.type_name, self.student_message, self.student_traceback = "NameError", f"{name} is not defined", ""
        self.name = name


class WorkerLost(Exception):
    """The student's process did not answer: out of time, out of memory, or crashed."""


class NotData(Exception):
    """The student's code gave back something that is not plain data where data was required."""


# ----------------------------------------------------------------------------- the student API


class Student:
    """The `student` fixture: the notebook's top-level names, reached through the engine."""

    def __init__(self, conn: Channel, limits: dict[str, Any], unavailable: str | None = None):
        self._conn = conn
        self._limits = limits
        self._lost = unavailable

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the student's top-level function or class `name`; data comes back as data."""
        return self._request({"op": "call", "name": name}, {"args": args, "kwargs": kwargs})

    def call_method(self, remote: Remote, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._request({"op": "call_method", "handle": _handle(remote), "name": method},
                             {"args": args, "kwargs": kwargs})

    def getattr(self, remote: Remote, attribute: str, as_remote: bool = False) -> Any:
        """An attribute of a worker object; `attribute` may be a dotted path ("decoder.weight.grad").
        `as_remote=True` keeps it in the worker as a handle even when it is data (for `same`)."""
        return self._request({"op": "getattr", "handle": _handle(remote), "name": attribute,
                              "as_remote": bool(as_remote)})

    def ref(self, name: str) -> Remote:
        """A handle on the notebook's top-level object `name` (a function, say), e.g. for `backward`."""
        return self._request({"op": "ref", "name": name})

    def same(self, first: Remote, second: Remote) -> bool:
        """Whether two handles stand for the very same object in the worker (`is`), e.g. a tied Parameter."""
        return self._request({"op": "same", "handles": [_handle(first), _handle(second)]}) is True

    def backward(self, remote: Remote, method: str, *args: Any, grad_outputs: Any, **kwargs: Any) -> Any:
        """Run `remote.method(*args, **kwargs)` in the worker with autograd on and backpropagate.

        Floating-point tensors among `args` become leaves that require grad. `grad_outputs` is the
        gradient of the output: a tensor, or a tuple matching the output with None for the parts that
        get none (`(torch.tensor(1.0), None)` for a `(loss, logits)` result). Returns the data
        `{"output": ..., "input_grads": [the gradient of each of args, or None]}`; the gradients of the
        worker's parameters stay in their `.grad` (read them with `getattr(module, "weight.grad")`).
        """
        return self._request({"op": "backward", "handle": _handle(remote), "name": method},
                             {"args": args, "kwargs": kwargs, "grad_outputs": grad_outputs})

    def generator(self, seed: int) -> Remote:
        """A torch.Generator seeded with `seed`, living in the worker."""
        return self._request({"op": "generator", "seed": int(seed)})

    def put(self, value: Any) -> Remote:
        return self._request({"op": "put"}, {"value": value})

    def get(self, remote: Remote) -> Any:
        return self._request({"op": "get", "handle": _handle(remote)})

    def has(self, name: str) -> bool:
        return bool(self._request({"op": "has", "name": name}))

    def value(self, name: str) -> Any:
        """A top-level variable of the notebook, as data."""
        return self._request({"op": "value", "name": name})

    def _request(self, request: dict[str, Any], payload: Any = None) -> Any:
        if self._lost:
            raise WorkerLost(self._lost)
        self._conn.send({"op": "rpc", "request": request}, dump_values(payload) if payload is not None else b"")
        reply, blob = self._conn.recv()
        kind = reply.get("kind")
        if kind == "data":
            try:
                return _plain(load_values(blob))
            except Exception as exc:
                raise NotData(f"your code returned something that is not plain data ({exc})") from None
        if kind == "remote":
            return Remote(int(reply["id"]), str(reply.get("type", "object"))[:100])
        if kind == "student_error":
            raise StudentError(str(reply.get("type"))[:100], str(reply.get("message"))[:1000],
                               str(reply.get("traceback", ""))[:4000])
        if kind == "missing":
            raise StudentMissing(str(reply.get("name"))[:100])
        if kind == "not_data":
            raise NotData(str(reply.get("message"))[:300])
        if kind == "timeout":
            self._lost = f"your code did not finish within {self._limits['check_time_limit_s']:g} s"
        elif kind == "memory":
            self._lost = f"your code used more than {self._limits['memory_limit_mb']} MB of memory"
        elif kind == "lost":
            self._lost = str(reply.get("reason"))
        else:
            self._lost = "the notebook's process sent an invalid reply"
        raise WorkerLost(self._lost)


def _handle(remote: Any) -> int:
    if not isinstance(remote, Remote):
        raise TypeError(f"expected a Remote handle, got {type(remote).__name__}")
    return remote.id


_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _plain(value: Any) -> Any:
    """Accept only exact plain types (weights_only already refuses classes; this is belt and braces)."""
    import torch

    if type(value) in _SCALARS or isinstance(value, (Remote, torch.dtype, torch.device, torch.Size)):
        return value
    if isinstance(value, torch.Tensor):
        return value if type(value) is torch.Tensor else value.detach().as_subclass(torch.Tensor)
    if type(value) is list:
        return [_plain(v) for v in value]
    if type(value) is tuple:
        return tuple(_plain(v) for v in value)
    if type(value) is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    raise NotData(f"unexpected {type(value).__name__} in a reply")


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
        config.addinivalue_line(
            "markers", "check(cell, points, feedback): a hidden check of the autograded cell `cell`, worth "
            "`points`, with one line of `feedback` shown when it fails")

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
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
        if report.failed:
            self.problems.append(f"could not collect {report.nodeid}: {_short(report.longreprtext, 2000)}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.unavailable = None
        if item.nodeid in self.checks:
            self.conn.send({"op": "begin_check", "name": item.name})
            reply, _ = self.conn.recv()
            self.unavailable = reply.get("unavailable")
        seed = zlib.crc32(item.name.encode())
        random.seed(seed)
        import torch

        torch.manual_seed(seed)

    @pytest.fixture
    def student(self) -> Student:
        return Student(self.conn, self.limits, self.unavailable)

    @pytest.fixture
    def bertcourse_canary_nonce(self) -> str:
        return self.nonce

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        """Serve notebooks with the collected checks until a command needs another session.

        pytest starts once per check module (imports, collection, assertion rewriting: ~0.3 s);
        each notebook then only runs the items again with `runtestprotocol`."""
        from _pytest.runner import runtestprotocol

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
                for item in session.items:
                    runtestprotocol(item, log=False, nextitem=None)
            self.answered = True
            self.conn.send(self.done(0))

    def done(self, exit_code: int) -> dict[str, Any]:
        checks = [{**meta, "nodeid": nodeid} for nodeid, meta in self.checks.items()]
        results = [{**result, "nodeid": nodeid, "canary": nodeid == self.canary}
                   for nodeid, result in self.results.items()]
        return {"op": "done", "exit_code": exit_code, "checks": checks, "results": results,
                "problems": self.problems}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
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
    return {"name": item.name, "passed": passed, "message": message,
            "detail": "" if passed else _short(report.longreprtext, 4000)}


def _message(exc: BaseException) -> str:
    """What a student may read: the reason, never the check's source or expected values."""
    if isinstance(exc, (StudentError, WorkerLost, NotData)):
        return str(exc)
    if isinstance(exc, AssertionError):
        first = str(exc).split("\n", 1)[0].strip()
        return first if first and not first.startswith("assert ") else "the result is not what was expected"
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
    _forget_stale_module(Path(module))
    # Plugins a judge does not need; unraisableexception alone costs ~0.4 s per session (gc.collect).
    skip = ["cacheprovider", "randomly", "xdist", "unraisableexception", "threadexception", "faulthandler",
            "pastebin", "junitxml", "doctest", "legacypath", "stepwise", "lfplugin", "nose", "setuponly",
            "setupplan"]
    args = [module, "-q", *(a for name in skip for a in ("-p", f"no:{name}")),
            "-c", str(ini), "--rootdir", str(Path(module).parent), "--strict-markers", "-o", "addopts=",
            "-W", "default"]
    return int(pytest.main(args, plugins=[plugin]))


def _forget_stale_module(path: Path) -> None:
    """Reuse an imported check module across sessions unless it changed or another file has its name."""
    loaded = sys.modules.get(path.stem)
    if loaded is None:
        return
    file = getattr(loaded, "__file__", None)
    stamp = getattr(loaded, "__bertcourse_mtime__", None)
    mtime = path.stat().st_mtime_ns if path.exists() else None
    if file is None or Path(file).resolve() != path.resolve() or (stamp is not None and stamp != mtime):
        del sys.modules[path.stem]
    else:
        loaded.__bertcourse_mtime__ = mtime  # type: ignore[attr-defined]


def judge_main(fd: int) -> None:
    import torch  # noqa: F401 - imported once here, not once per session by a check module

    conn = Channel.from_fd(fd)
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
