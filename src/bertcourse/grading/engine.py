"""The grading engine: grade a notebook against its hidden checks without trusting the notebook.

Public API (stable; `autograde`, `check`, `bertcourse grade` and the course's tests build on it):

    from bertcourse.grading import Grader, grade_notebook, infer_exercise, NotebookResult

    with Grader(course=None, *, sandbox="auto", threads=1, profile=None,
                extra_read=None, extra_write=None) as grader:          # course: a Course, or load_course()
        result = grader.grade("submitted/ana/ex01/masking.ipynb", "ex01")   # exercise id or an Exercise
        grader.checks("ex01")        # -> list[CheckInfo(name, cell, points, feedback, nodeid)], cached
        grader.source_notebook("ex01")   # solutions/ (else exercises/) notebook, or None
        grader.start()               # optional: start the helper processes early (else at first use)
    result = grade_notebook(path, exercise_id=None, course=None)   # one-off (cold start, ~3-5 s)
    infer_exercise(path, course=None) -> str   # by the grade_ids the notebook carries, else by its path

    NotebookResult: notebook, exercise, score, max_score, error (None, or why the grade is void),
        checks: [CheckResult(name, cell, points, max_points, passed, feedback, message, detail)],
        parts: {test-cell grade_id: PartScore(grade_id, score, max_score)},
        cells: [CellRecord(index, grade_id, status ok|error|timeout|crashed|memory, error, output)],
        notes: [Note(kind, message, cell)], duration_s; .to_dict() / NotebookResult.from_dict(),
        .failed_checks(), .passed_checks(), .check(name).
    `message` is safe for students; `detail` (pytest's report) may reveal the check: instructors only.

`grade` never raises for anything a submission does: a bad file, a wrong exercise, crashes, hangs and
memory hogs end up in `result.error` (grade void, score 0) or `result.notes` and the failed checks'
messages. It raises a BertcourseError only for course-side problems: an unknown exercise
(CourseError), a check module that does not import or has unmarked checks (GradingError). A `Grader`
grades one notebook at a time (calls from several threads are serialised); for parallel grading use
one Grader per process (each holds one zygote and one judge process).

How (see worker.py, judge.py, sandbox.py): a zygote process imports torch and IPython once and forks
one worker per notebook; the worker confines itself (namespaces: no network, no other process;
Landlock), runs the code cells (autograded test cells are skipped) and then answers requests. A
long-lived judge runs the hidden pytest checks; every `student.*` call is relayed by this module,
which enforces per-cell/per-check time limits (`check_time_limit_s`), each graded part's budget
(`part_time_limit_s`), the limit on running the cells (`time_limit_s`) and the memory limit
(`memory_limit_mb`, an RSS watchdog reading /proc plus RLIMIT_DATA in the worker). A worker that
dies or hangs is restarted, re-running the notebook without the cell that killed it, for the
remaining checks. A canary check that must fail proves that the checks ran.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcourse.course import Course, Exercise, load_course
from bertcourse.errors import BertcourseError
from bertcourse.grading.protocol import Channel, ProtocolError
from bertcourse.grading.results import CellRecord, CheckResult, NotebookResult
from bertcourse.grading.sandbox import default_policy, landlock_abi, rss_mb
from bertcourse.grading.submission import (
    NotebookCells,
    SubmissionError,
    compare_with_source,
    overlap,
    read_notebook,
)

GRACE_S = 2.0  # how long past a soft time limit the engine waits before killing the worker
POLL_S = 0.05  # memory watchdog period
STARTUP_TIMEOUT_S = 60.0
ZYGOTE_TIMEOUT_S = 300.0  # a zygote still importing torch on a busy machine answers late
MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # what a worker may write to its stdout/stderr file
# Top-level packages the zygote may import ahead of time when a notebook imports them.
PRELOADABLE = {"torch", "numpy", "transformers", "tokenizers", "datasets", "matplotlib", "tqdm", "sklearn",
               "bertcourse", "scipy", "pandas"}
_IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", re.MULTILINE)


class GradingError(BertcourseError):
    """A problem on the course side (not the submission's): unknown exercise, broken check module."""


@dataclass(frozen=True)
class CheckInfo:
    name: str
    cell: str
    points: float
    feedback: str
    nodeid: str


class _Lost(Exception):
    """The worker is gone: status is timeout | crashed | memory | time-limit."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


# ----------------------------------------------------------------------------- helper processes


# What the helper processes inherit from the grader's environment: nothing else, so that no secret
# (BERTCOURSE_DB_URL, PGPASSWORD, tokens) reaches a process that runs next to student code.
_INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "BERTCOURSE_DATA", "BERTCOURSE_PROFILE", "VIRTUAL_ENV",
                  "PYTHONPATH", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def _python_env(course_root: Path, scratch: Path, cache_dir: str) -> dict[str, str]:
    """The zygote's and the judge's environment: an allow-list, with temporary files in `scratch`."""
    env = {k: v for k, v in os.environ.items() if k in _INHERITED_ENV}
    env.update(PYTHONHASHSEED="0", BERTCOURSE_ROOT=str(course_root), PYTHONDONTWRITEBYTECODE="1",
               BERTCOURSE_CACHE=cache_dir, TMPDIR=str(scratch))
    return env


_SCRATCH_PREFIX = "bertcourse-grader-"


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _scratch_folder() -> Path:
    """A new scratch folder for one Grader, named after this process, after removing the folders of
    graders whose process is gone (killed with SIGKILL, say): `bertcourse-grader-<pidns>-<pid>-*`."""
    root, namespace = Path(tempfile.gettempdir()), _pid_namespace()
    try:
        stale = [p for p in root.glob(f"{_SCRATCH_PREFIX}{namespace}-*-*") if p.is_dir() and not p.is_symlink()]
    except OSError:
        stale = []
    for folder in stale:
        pid = folder.name[len(_SCRATCH_PREFIX) + len(namespace) + 1:].split("-", 1)[0]
        try:
            if not pid.isdigit() or folder.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue  # alive (or not ours to ask about)
    return Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{namespace}-{os.getpid()}-"))


class _Zygote:
    def __init__(self, course_root: Path, log_dir: Path, cache_dir: str):
        # Message boundaries without framing: SEQPACKET on Linux, datagrams elsewhere (macOS).
        kind = socket.SOCK_SEQPACKET if sys.platform.startswith("linux") else socket.SOCK_DGRAM
        ours, theirs = socket.socketpair(socket.AF_UNIX, kind)
        self.log = open(log_dir / "zygote.log", "ab")  # noqa: SIM115 - lives as long as the process
        # HOME and MPLCONFIGDIR in the grader's scratch folder: preloading (IPython, matplotlib's font
        # cache) writes there once, never in the real home, and every forked worker inherits the result.
        env = _python_env(course_root, log_dir, cache_dir)
        env.update(HOME=str(log_dir), MPLBACKEND="Agg", MPLCONFIGDIR=str(log_dir / "matplotlib"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bertcourse.grading.worker", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], cwd=log_dir, env=env,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        theirs.close()
        self.sock = ours
        self.sock.settimeout(ZYGOTE_TIMEOUT_S)  # its first answer waits for torch to import
        self.preloaded: set[str] = set()

    def alive(self) -> bool:
        return self.process.poll() is None

    def preload(self, modules: list[str]) -> None:
        todo = [m for m in modules if m not in self.preloaded]
        if todo:
            self.sock.send(json.dumps({"op": "preload", "modules": todo}).encode())
            self.sock.recv(1024)
            self.preloaded.update(todo)

    def fork(self, request: dict[str, Any]) -> tuple[int, Channel]:
        self.sock.send(json.dumps({"op": "fork", **request}).encode())
        message, fds, _, _ = socket.recv_fds(self.sock, 1024, 1)
        if not message or not fds:
            raise OSError("the zygote did not answer")
        return int(json.loads(message)["pid"]), Channel(socket.socket(fileno=fds[0]))

    def close(self) -> None:
        self.sock.close()
        _stop(self.process)
        self.log.close()


class _Judge:
    def __init__(self, course_root: Path, log_dir: Path, cache_dir: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = _python_env(course_root, log_dir, cache_dir)  # its own temporary folder goes in log_dir
        if os.environ.get("HOME"):
            env["HOME"] = os.environ["HOME"]
        self.log = open(log_dir / "judge.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bertcourse.grading.judge", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], cwd=log_dir, env=env,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        theirs.close()
        self.channel = Channel(ours)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        try:
            self.channel.send({"op": "exit"}, timeout=1)
        except OSError:
            pass
        self.channel.close()
        _stop(self.process)
        self.log.close()


def _stop(process: subprocess.Popen) -> None:
    try:
        process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ----------------------------------------------------------------------------- the Grader


class Grader:
    """Grades notebooks one after another with warm helper processes. Use as a context manager."""

    def __init__(self, course: Course | None = None, *, sandbox: str = "auto", threads: int = 1,
                 profile: str | None = None, extra_read: list[str] | None = None,
                 extra_write: list[str] | None = None):
        """`sandbox`: auto (Landlock where the kernel has it, else a note on every result), require
        (refuse to grade without it) or off. `threads`: torch threads per worker. `profile`: the
        BERTCOURSE_PROFILE notebooks see (default: $BERTCOURSE_PROFILE, else cpu-quick, so that
        grading never trains for long). `extra_read`/`extra_write`: more paths the worker may use
        (default writable: the course cache, $BERTCOURSE_CACHE or ~/.cache/bertcourse)."""
        if sandbox not in ("auto", "require", "off"):
            raise GradingError(f"sandbox must be auto, require or off, not {sandbox!r}")
        if sandbox == "require" and landlock_abi() < 1:
            raise GradingError("the worker sandbox is required but this kernel has no Landlock")
        self.course = course or load_course()
        self.sandbox = sandbox
        self.threads = threads
        self.extra_read = list(extra_read or [])
        cache = os.environ.get("BERTCOURSE_CACHE") or str(Path.home() / ".cache" / "bertcourse")
        self.cache_dir = str(Path(cache).expanduser())
        self.extra_write = list(extra_write if extra_write is not None else [self.cache_dir])
        if extra_write is None:
            Path(self.cache_dir).mkdir(parents=True, exist_ok=True)  # a missing folder could not be granted
        self.profile = profile or os.environ.get("BERTCOURSE_PROFILE") or (
            "cpu-quick" if "cpu-quick" in self.course.profiles else None)
        self._tmp = _scratch_folder()
        self._zygote: _Zygote | None = None
        self._judge: _Judge | None = None
        self._checks: dict[tuple[str, int], list[CheckInfo]] = {}
        self._lock = threading.RLock()  # one notebook at a time per Grader (its helpers are sequential)

    # -- lifecycle

    def __enter__(self) -> Grader:
        return self

    def start(self) -> Grader:
        """Start the helper processes now (they import torch in the background), not at the first grade."""
        with self._lock:
            self._zygote_ready()
            self._judge_ready()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for helper in (self._zygote, self._judge):
            if helper is not None:
                helper.close()
        self._zygote = self._judge = None
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _zygote_ready(self) -> _Zygote:
        self._tmp.mkdir(parents=True, exist_ok=True)  # again, after close()
        if self._zygote is None or not self._zygote.alive():
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = _Zygote(self.course.root, self._tmp, self.cache_dir)
        return self._zygote

    def _judge_ready(self) -> _Judge:
        self._tmp.mkdir(parents=True, exist_ok=True)
        if self._judge is None or not self._judge.alive():
            if self._judge is not None:
                self._judge.close()
            self._judge = _Judge(self.course.root, self._tmp, self.cache_dir)
        return self._judge

    def _restart_judge(self) -> None:
        if self._judge is not None:
            _kill_group(self._judge.process.pid)
            self._judge.close()
            self._judge = None

    # -- exercises and their checks

    def exercise(self, exercise: str | Exercise) -> Exercise:
        return exercise if isinstance(exercise, Exercise) else self.course.exercise(exercise)

    def checks_path(self, exercise: str | Exercise) -> Path:
        path = self.course.path(self.exercise(exercise).checks)
        if not path.is_file():
            raise GradingError(f"the hidden checks {path} do not exist (they live in the course checkout's "
                               "autograder/ folder, not in the student release)")
        return path.resolve()

    def checks(self, exercise: str | Exercise) -> list[CheckInfo]:
        """The hidden checks of an exercise (collected once per version of the module)."""
        path = self.checks_path(exercise)
        key = (str(path), path.stat().st_mtime_ns)
        with self._lock:
            return self._checks.get(key) or self._collect(path, key)

    def _collect(self, path: Path, key: tuple[str, int]) -> list[CheckInfo]:
        self._zygote_ready()  # start importing torch in the zygote while the judge collects
        judge = self._judge_ready()
        judge.channel.send({"op": "collect", "module": str(path), "mtime": key[1]})
        try:
            header, _ = judge.channel.recv(timeout=STARTUP_TIMEOUT_S * 2)
        except (EOFError, TimeoutError, ProtocolError) as exc:
            self._restart_judge()
            raise GradingError(f"the judge could not collect {path}: {exc}; see {self._tmp}/judge.log") from exc
        if header.get("problems"):
            raise GradingError(f"{path}: " + "; ".join(header["problems"]))
        infos = [CheckInfo(c["name"], c["cell"], c["points"], c["feedback"], c["nodeid"])
                 for c in header["checks"]]
        if not infos:
            raise GradingError(f"{path}: no checks found (functions named test_* or check_*)")
        self._checks[key] = infos
        return self._checks[key]

    def source_notebook(self, exercise: str | Exercise) -> Path | None:
        """The instructor's notebook (solutions/), else the release (exercises/), else None."""
        ex = self.exercise(exercise)
        for folder in ("solutions", "exercises"):
            path = self.course.root / folder / ex.notebook
            if path.is_file():
                return path
        return None

    # -- grading

    def grade(self, notebook: str | Path, exercise: str | Exercise) -> NotebookResult:
        """Grade one notebook; never raises for anything the submission does (see the module doc)."""
        with self._lock:
            return self._grade(notebook, exercise)

    def _grade(self, notebook: str | Path, exercise: str | Exercise) -> NotebookResult:
        started = time.monotonic()
        ex = self.exercise(exercise)
        checks = self.checks(ex)
        path = Path(notebook).resolve()
        result = NotebookResult(notebook=str(path), exercise=ex.id)
        try:
            cells = read_notebook(path)
            problem = self._wrong_exercise(cells, ex, checks)
        except SubmissionError as exc:
            cells, problem = None, str(exc)
        if problem or cells is None:
            return self._void(result, checks, problem or "unreadable notebook", started)
        self._compare(cells, ex, result)
        session = _Session(self, ex, cells, path.parent, result, {c.name: c.cell for c in checks})
        try:
            self._run_checks(session, ex, checks, result)
        finally:
            session.close()
        if session.refused:
            result.error = session.refused
        result.cells = [session.records[i] for i in sorted(session.records)]
        result.duration_s = round(time.monotonic() - started, 3)
        result.total()
        return result

    def _void(self, result: NotebookResult, checks: list[CheckInfo], reason: str, started: float) -> NotebookResult:
        result.error = reason
        result.checks = [CheckResult(c.name, c.cell, 0.0, c.points, False, c.feedback, f"not graded: {reason}")
                         for c in checks]
        result.duration_s = round(time.monotonic() - started, 3)
        result.total()
        return result

    def _wrong_exercise(self, cells: NotebookCells, ex: Exercise, checks: list[CheckInfo]) -> str | None:
        """Why this notebook is not `ex` (judging by the grade_ids it carries), or None."""
        if not cells.grade_ids:
            return None  # no nbgrader metadata at all: run every code cell (noted by _compare)
        source = self.source_notebook(ex)
        expected = read_notebook(source).grade_ids if source else sorted({c.cell for c in checks})
        ours = overlap(cells, expected)
        best, best_overlap = None, 0
        for other in self.course.exercises:
            other_source = self.source_notebook(other) if other.id != ex.id else None
            shared = overlap(cells, read_notebook(other_source).grade_ids) if other_source else 0
            if shared > best_overlap:
                best, best_overlap = other.id, shared
        # Shared names (a `setup` cell) may overlap a little: it takes a clear majority to call it another's.
        if best is not None and ours * 2 < best_overlap:
            return f"this notebook belongs to exercise {best!r}, not {ex.id!r} (judging by its graded cells)"
        if ours == 0:
            return f"this notebook is not exercise {ex.id!r}: none of its graded cells belong to that exercise"
        return None

    def _compare(self, cells: NotebookCells, ex: Exercise, result: NotebookResult) -> None:
        if not cells.grade_ids:
            result.add_note("no-metadata", "the notebook carries no nbgrader cell metadata; every code cell ran")
            return
        source = self.source_notebook(ex)
        if source is not None:
            for kind, message, grade_id in compare_with_source(cells, read_notebook(source)):
                result.add_note(kind, message, grade_id)

    def _run_checks(self, session: _Session, ex: Exercise, checks: list[CheckInfo], result: NotebookResult) -> None:
        nonce = secrets.token_hex(8)
        judge = self._judge_ready()
        limits = {"check_time_limit_s": ex.check_time_limit_s, "memory_limit_mb": ex.memory_limit_mb,
                  "time_limit_s": ex.time_limit_s}
        started = time.monotonic()
        slack = 60 + len(checks) * (GRACE_S + 1)
        budget = session.bound_s()
        internal = None
        try:
            module = self.checks_path(ex)
            judge.channel.send({"op": "run", "module": str(module), "mtime": module.stat().st_mtime_ns,
                                "limits": limits, "nonce": nonce})
            while True:
                judge_deadline = started + budget + session.uncharged + slack
                header, blob = judge.channel.recv(timeout=max(judge_deadline - time.monotonic(), 1.0))
                op = header.get("op")
                if op == "done":
                    session.end_checks()
                    break
                try:
                    if op == "begin_check":
                        reply = {"unavailable": session.begin_check(str(header.get("name")))}, b""
                    else:
                        reply = session.rpc(header.get("request", {}), blob)
                except Exception as exc:  # an engine bug or a dead zygote: void the grade, keep the judge in step
                    internal = f"internal grading error: {type(exc).__name__}: {exc}"
                    lost = {"unavailable": internal} if op == "begin_check" else {"kind": "lost", "reason": internal}
                    reply = lost, b""
                judge.channel.send(*reply)
        except (EOFError, TimeoutError, ProtocolError, OSError) as exc:
            self._restart_judge()
            self._void(result, checks, f"internal grading error: the judge stopped ({exc})", time.monotonic())
            return
        if internal:
            self._void(result, checks, internal, time.monotonic())
            return
        by_nodeid = {r["nodeid"]: r for r in header.get("results", [])}
        for problem in header.get("problems", []):
            result.add_note("check-problem", problem)
        for info in checks:
            ran = by_nodeid.get(info.nodeid)
            passed = bool(ran and ran.get("passed"))
            message = "" if passed else (ran or {}).get("message") or "the check did not run"
            result.checks.append(CheckResult(info.name, info.cell, info.points if passed else 0.0, info.points,
                                             passed, info.feedback, message, (ran or {}).get("detail", "")))
        result.error = canary_problem(header.get("results", []), nonce)


def canary_problem(results: list[dict[str, Any]], nonce: str) -> str | None:
    """Why a judge session's results cannot be trusted, judging by its canary (None when they can)."""
    canary = [r for r in results if r.get("canary")]
    if len(canary) != 1 or canary[0].get("passed") or canary[0].get("message") != nonce:
        return ("the canary check did not fail as it must, so the checks did not really run; "
                "the grade is void")
    return None


# ----------------------------------------------------------------------------- one notebook's worker


_NOTEBOOK = "\0notebook"  # the budget of running the notebook's cells (parts are keyed by grade_id)


class _Session:
    """The worker of one notebook: start (and restart) it, relay requests, enforce the limits.

    Time is charged to one budget at a time: running the notebook's cells (every start and restart)
    to the notebook's `time_limit_s`, each check to its part's `part_time_limit_s`, and starting a
    process from the zygote to nobody. A check gets `check_time_limit_s`, or what is left of its part's
    budget when that is less. So a hang spends only its own part's time: other parts get the worker
    restarted and their own budget, and a notebook costs at most time_limit_s + parts x part budget."""

    def __init__(self, grader: Grader, ex: Exercise, cells: NotebookCells, submission_dir: Path,
                 result: NotebookResult, part_of: dict[str, str] | None = None):
        self.grader, self.ex, self.cells, self.result = grader, ex, cells, result
        self.submission_dir = submission_dir
        self.part_of = part_of or {}  # check name -> its part (the test cell's grade_id)
        self.part_limit = ex.part_limit_s
        self.budgets: dict[str, float] = {_NOTEBOOK: ex.time_limit_s}
        self.clock: str | None = None  # the budget being charged now
        self.since = time.monotonic()
        self.uncharged = 0.0  # seconds charged to no budget (process starts)
        self.part = ""  # the part of the check being run
        self.part_bound = False  # whether the part's budget, not check_time_limit_s, ends this check
        self.refused: str | None = None  # why grading was refused (sandbox="require" without a sandbox)
        self.skip: set[int] = set()
        self.records: dict[int, CellRecord] = {}
        self.pid: int | None = None
        self.channel: Channel | None = None
        self.work_dir: Path | None = None
        self.gone: str | None = None  # why no worker can be started any more
        self.check_deadline = self.since
        self.sandbox_noted = False
        modules = {m for c in cells.to_run for m in _IMPORT.findall(c.source) if m.split(".")[0] in PRELOADABLE}
        self.preload = sorted(modules)

    # -- time budgets

    def _charge(self, budget: str | None) -> None:
        """Charge the time since the last switch to the current budget, then start charging `budget`."""
        now = time.monotonic()
        if self.clock is None:
            self.uncharged += now - self.since
        else:
            self.budgets[self.clock] = self._left(self.clock, now)
        self.clock, self.since = budget, now

    def _left(self, budget: str, now: float | None = None) -> float:
        left = self.budgets.get(budget, self.part_limit)
        return left - ((now or time.monotonic()) - self.since) if budget == self.clock else left

    def bound_s(self) -> float:
        """The most seconds this notebook may still take, besides process starts."""
        parts = set(self.part_of.values())
        return max(self._left(_NOTEBOOK), 0) + sum(max(self._left(p), 0) for p in parts)

    # -- limits and reasons

    def _reason(self, status: str, during: str) -> str:
        if status == "time-limit":
            return f"grading stopped: the notebook used up its time limit of {self.ex.time_limit_s:g} s"
        if status == "part-time-limit":
            return f"grading of this part stopped: its checks used up their time limit of {self.part_limit:g} s"
        if status == "timeout":
            return f"your code did not finish within {self.ex.check_time_limit_s:g} s"
        if status == "memory":
            return f"your code used more than {self.ex.memory_limit_mb} MB of memory"
        return f"the Python process running your notebook crashed {during} (os._exit, a segfault or a kill)"

    def _await(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        """The worker's next message, watching its memory; _Lost when it dies, hangs or hogs memory."""
        assert self.channel is not None and self.pid is not None
        notebook_end = time.monotonic() + self._left(_NOTEBOOK) if self.clock == _NOTEBOOK else float("inf")
        while True:
            now = time.monotonic()
            if now >= min(deadline, notebook_end):
                self._kill()
                raise _Lost("time-limit" if now >= notebook_end else "timeout")
            try:
                return self.channel.recv(timeout=min(POLL_S, min(deadline, notebook_end) - now))
            except TimeoutError:
                pass
            except (EOFError, ProtocolError, OSError):
                self._kill()
                raise _Lost("crashed") from None
            if rss_mb(self.pid) > self.ex.memory_limit_mb:
                self._kill()
                raise _Lost("memory")

    def _kill(self) -> None:
        if self.pid is not None:
            _kill_group(self.pid)
        if self.channel is not None:
            self.channel.close()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        self.pid = self.channel = self.work_dir = None

    def close(self) -> None:
        self._kill()

    # -- running the notebook

    def _fork(self) -> None:
        grader = self.grader
        zygote = grader._zygote_ready()
        if self.preload:
            zygote.preload(self.preload)
        self.work_dir = Path(tempfile.mkdtemp(prefix="worker-", dir=grader._tmp))
        policy = None
        if grader.sandbox != "off":
            policy = default_policy(grader.course.root, self.work_dir, self.submission_dir,
                                    grader.checks_path(self.ex), grader.extra_read, grader.extra_write).__dict__
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.work_dir),
               "TMPDIR": str(self.work_dir), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
               "BERTCOURSE_ROOT": str(grader.course.root), "BERTCOURSE_CACHE": grader.cache_dir,
               "NBGRADER_EXECUTION": "autograde", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(grader.threads), "TQDM_DISABLE": "1"}
        if os.environ.get("BERTCOURSE_DATA"):
            env["BERTCOURSE_DATA"] = os.path.abspath(os.environ["BERTCOURSE_DATA"])  # the worker cwd differs
        if grader.profile:
            env["BERTCOURSE_PROFILE"] = grader.profile
        request = {"work_dir": str(self.work_dir), "env": env, "sandbox": policy,
                   "memory_limit_mb": self.ex.memory_limit_mb, "max_output_bytes": MAX_OUTPUT_BYTES,
                   "submission_dir": str(self.submission_dir), "threads": grader.threads}
        try:
            self.pid, self.channel = zygote.fork(request)
        except OSError:
            grader._zygote = None  # a broken zygote is replaced on the next try
            zygote.close()
            zygote = grader._zygote_ready()
            self.pid, self.channel = zygote.fork(request)

    def _start(self) -> str | None:
        """Start a worker and run the notebook; None when it is ready, else why checks cannot run."""
        limit = self.ex.check_time_limit_s
        while True:
            if self._left(_NOTEBOOK) <= 0:
                self.gone = self._reason("time-limit", "")
                self._note_once("time-limit", self.gone)
                return self.gone
            self._charge(None)  # a cold or busy zygote is not the notebook's time
            self._fork()
            self._charge(_NOTEBOOK)
            assert self.channel is not None
            current: int | None = None
            last: int | None = None
            try:
                hello, _ = self._await(time.monotonic() + STARTUP_TIMEOUT_S)
                problem = hello.get("sandbox_problem")
                if problem and self.grader.sandbox == "require":
                    self._kill()
                    self.gone = self.refused = f"not graded: the worker sandbox is required, but {problem}"
                    return self.gone
                if problem or self.grader.sandbox == "off":
                    if not self.sandbox_noted:
                        self.result.add_note("sandbox-unavailable", "the worker ran without a full sandbox "
                                             f"({problem or 'switched off'}): the hidden checks, the network or "
                                             "other processes may have been within its reach")
                        self.sandbox_noted = True
                if not sys.platform.startswith("linux"):
                    self._note_once("memory-unenforced", "the memory limit is enforced on Linux only (/proc)")
                cells = [c.to_wire() for c in self.cells.to_run if c.index not in self.skip]
                try:
                    self.channel.send({"op": "run", "cells": cells, "cell_time_limit_s": limit}, timeout=30)
                except OSError:
                    self._kill()
                    raise _Lost("crashed") from None
                while True:
                    header, _ = self._await(time.monotonic() + limit + GRACE_S)
                    op = header.get("op")
                    if op == "cell_start":
                        current = last = int(header["index"])
                    elif op == "cell_end":
                        self._record(header)
                        current = None
                    elif op == "ready":
                        return None
                    else:
                        raise _Lost("crashed")
            except _Lost as lost:
                culprit = current if current is not None else last
                if lost.status == "time-limit" or culprit is None:
                    self.gone = self._reason(lost.status if culprit is not None else "crashed", "while starting")
                    if culprit is not None:
                        self.records[culprit] = CellRecord(culprit, self._grade_id(culprit), "timeout", self.gone)
                    self._note_once(lost.status, self.gone)
                    return self.gone
                self.skip.add(culprit)
                grade_id = self._grade_id(culprit)
                reason = self._reason(lost.status, f"in cell {culprit}")
                self.records[culprit] = CellRecord(culprit, grade_id, lost.status, reason)
                self.result.add_note(f"cell-{lost.status}", f"cell {culprit}"
                                     f"{f' ({grade_id})' if grade_id else ''}: {reason}; the notebook was re-run "
                                     "without it", grade_id)

    def _grade_id(self, index: int) -> str | None:
        return next((c.grade_id for c in self.cells.code if c.index == index), None)

    def _record(self, header: dict[str, Any]) -> None:
        index = int(header.get("index", -1))
        status = str(header.get("status", "error"))[:20]
        error = str(header.get("error", ""))[:2000]
        grade_id = self._grade_id(index)
        if status == "memory":
            error = f"the cell used more than {self.ex.memory_limit_mb} MB of memory ({error})"
        first_time = index not in self.records
        self.records[index] = CellRecord(index, grade_id, status, error, str(header.get("output", ""))[:2100])
        if status != "ok" and first_time:
            self.result.add_note(f"cell-{status}", f"cell {index}{f' ({grade_id})' if grade_id else ''}: {error}",
                                 grade_id)

    def _note_once(self, kind: str, message: str) -> None:
        if not any(n.message == message for n in self.result.notes):
            self.result.add_note(kind, message)

    # -- serving the judge

    def begin_check(self, name: str) -> str | None:
        self.part = self.part_of.get(name, "")
        self._charge(self.part)
        if self.gone:
            return self.gone
        if self._left(self.part) <= 0:
            return self._reason("part-time-limit", "")
        if self.channel is None:
            reason = self._start()
            self._charge(self.part)
            if reason:
                return reason
            if self._left(self.part) <= 0:
                return self._reason("part-time-limit", "")
        left = self._left(self.part)
        self.part_bound = left < self.ex.check_time_limit_s
        self.check_deadline = time.monotonic() + min(self.ex.check_time_limit_s, left)
        reply = self.rpc({"op": "reset", "seed": zlib.crc32(name.encode())}, b"")
        return reply[0].get("reason") if reply[0].get("kind") == "lost" else None

    def end_checks(self) -> None:
        self._charge(None)

    def rpc(self, request: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], bytes]:
        if self.channel is None:
            return {"kind": "lost", "reason": self.gone or "the notebook's process is gone"}, b""
        left = self.check_deadline - time.monotonic()
        try:
            if left <= 0:
                self._kill()
                raise _Lost("timeout")
            self.channel.send({**request, "deadline_s": max(left - 0.25, 0.05)}, blob, timeout=left + GRACE_S)
            reply = self._await(self.check_deadline + GRACE_S)
            if reply[0].get("kind") == "timeout" and self.part_bound:  # the part's time ran out, not the check's
                return {"kind": "lost", "reason": self._reason("part-time-limit", "")}, b""
            return reply
        except (OSError, TimeoutError):
            self._kill()
            reason = self._reason("crashed", "during this check")
        except _Lost as lost:
            status = "part-time-limit" if lost.status == "timeout" and self.part_bound else lost.status
            reason = self._reason(status, "during this check")
        return {"kind": "lost", "reason": reason}, b""


# ----------------------------------------------------------------------------- conveniences


def grade_notebook(path: str | Path, exercise_id: str | None = None, course: Course | None = None,
                   **grader_options: Any) -> NotebookResult:
    """Grade one notebook with fresh helper processes (a `Grader` is faster for many)."""
    course = course or load_course()
    with Grader(course, **grader_options) as grader:
        return grader.grade(path, exercise_id or infer_exercise(path, course))


def infer_exercise(path: str | Path, course: Course | None = None) -> str:
    """The exercise a notebook belongs to: most shared grade_ids with an exercise's source notebook,
    else the exercise whose notebook path or id matches the file's path."""
    course = course or load_course()
    path = Path(path)
    if not course.exercises:
        raise GradingError("course.yml defines no exercises")
    try:
        cells = read_notebook(path)
    except SubmissionError:
        cells = None
    if cells is not None and cells.grade_ids:
        best, best_overlap = None, 0
        for ex in course.exercises:
            for folder in ("solutions", "exercises"):
                source = course.root / folder / ex.notebook
                if source.is_file():
                    shared = overlap(cells, read_notebook(source).grade_ids)
                    if shared > best_overlap:
                        best, best_overlap = ex.id, shared
                    break
        if best:
            return best
    resolved = str(path.resolve())
    for ex in course.exercises:
        if resolved.endswith("/" + ex.notebook) or ex.id in path.resolve().parts:
            return ex.id
    known = ", ".join(e.id for e in course.exercises)
    raise GradingError(f"{path}: cannot tell which exercise this notebook is; pass --exercise (one of {known})")
