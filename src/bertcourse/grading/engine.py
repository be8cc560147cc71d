"""The grading engine: grade a notebook against its hidden checks without trusting the notebook.

Public API (stable; `autograde`, `validate`, `bertcourse grade` and the course's tests build on it):

    from bertcourse.grading import Grader, grade_notebook, infer_exercise, NotebookResult

    with Grader(course=None, *, sandbox="auto", threads=1, profile=None,
                extra_read=None, extra_write=None) as grader:          # course: a Course, or load_course()
        result = grader.grade("submitted/ana/ex01/masking.ipynb", "ex01")   # exercise id or an Exercise
        grader.grade(path, "ex01", only={"test_mask_share"})   # just these checks (the course's proofs)
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

How, module by module:
    engine.py     the Grader: its helper processes, the checks it collects, and grade()
    steps.py      GRADING_STEPS, the steps of grading one notebook in the order they run
    exercises.py  an exercise's source notebook, graded cells and checks; which exercise a notebook is
    session.py    one notebook's worker: started, restarted, watched (time limits, memory), relayed to
    budgets.py    the time budgets of one notebook (its cells' run, each graded part)
    processes.py  the zygote and judge processes, their environment and scratch folder
    zygote.py     (process) imports torch once, forks and confines one worker per notebook (sandbox.py)
    worker.py     (process) runs the notebook's cells and answers the judge's requests
    judge.py      (process) runs the hidden pytest checks, with a canary check that must fail
    protocol.py   the messages between them; submission.py, results.py: what goes in and comes out
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bertcourse.course import Course, Exercise, load_course, resolve_profile
from bertcourse.grading.exercises import (
    CheckInfo,
    GradingError,
    check_files,
    checks_path,
    checks_version,
    infer_exercise,
    source_notebook,
)
from bertcourse.grading.processes import JudgeProcess, ZygoteProcess, kill_group, scratch_folder
from bertcourse.grading.protocol import Channel, ProtocolError
from bertcourse.grading.results import NotebookResult
from bertcourse.grading.sandbox import landlock_abi
from bertcourse.grading.session import STARTUP_TIMEOUT_S, WorkerSettings
from bertcourse.grading.steps import Grading, run_steps


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
        self.profile = resolve_profile(profile, self.course, use_gpu=False)
        self._scratch = scratch_folder()  # logs, the judge's and every worker's temporary folders
        self._zygote: ZygoteProcess | None = None
        self._judge: JudgeProcess | None = None
        self._checks: dict[tuple[str, int], list[CheckInfo]] = {}
        self._lock = threading.RLock()  # one notebook at a time per Grader (its helpers are sequential)

    @property
    def worker_settings(self) -> WorkerSettings:
        """What every worker this Grader starts gets (sandbox, threads, profile, paths)."""
        return WorkerSettings(self.course.root, self._scratch, self.sandbox, self.threads, self.profile,
                              self.cache_dir, self.extra_read, self.extra_write)

    # -- lifecycle

    def __enter__(self) -> Grader:
        return self

    def start(self) -> Grader:
        """Start the helper processes now (they import torch in the background), not at the first grade."""
        with self._lock:
            self._zygote_ready()
            self.ready_judge()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the helper processes and remove the scratch folder (a later grade starts them again)."""
        helpers = [helper for helper in (self._zygote, self._judge) if helper is not None]
        for helper in helpers:  # both asked first: a helper still starting up is waited for once, not twice
            helper.stop()
        for helper in helpers:
            helper.close()
        self._zygote = self._judge = None
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _zygote_ready(self) -> ZygoteProcess:
        self._scratch.mkdir(parents=True, exist_ok=True)  # again, after close()
        if self._zygote is None or not self._zygote.alive():
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = ZygoteProcess(self.course.root, self._scratch, self.cache_dir)
        return self._zygote

    def ready_judge(self) -> JudgeProcess:
        """The judge process, started (again) when there is none or it died."""
        self._scratch.mkdir(parents=True, exist_ok=True)
        if self._judge is None or not self._judge.alive():
            if self._judge is not None:
                self._judge.close()
            self._judge = JudgeProcess(self.course.root, self._scratch, self.cache_dir)
        return self._judge

    def restart_judge(self) -> None:
        """Kill the judge (out of step, or hung); the next `ready_judge` starts a new one."""
        if self._judge is not None:
            kill_group(self._judge.process.pid)
            self._judge.close()
            self._judge = None

    def fork_worker(self, request: dict[str, Any], preload: list[str]) -> tuple[int, Channel]:
        """A new worker from the zygote (after it imports `preload`); a broken zygote is replaced once."""
        zygote = self._zygote_ready()
        if preload:
            zygote.preload(preload)
        try:
            return zygote.fork(request)
        except OSError:
            self._zygote = None  # a broken zygote is replaced on the next try
            zygote.close()
            return self._zygote_ready().fork(request)

    # -- exercises and their checks

    def exercise(self, exercise: str | Exercise) -> Exercise:
        """The course's exercise of that id (an Exercise is returned as it is)."""
        return exercise if isinstance(exercise, Exercise) else self.course.exercise(exercise)

    def checks_path(self, exercise: str | Exercise) -> Path:
        """The exercise's hidden check module (GradingError when it is missing)."""
        return checks_path(self.course, self.exercise(exercise))

    def checks(self, exercise: str | Exercise) -> list[CheckInfo]:
        """The hidden checks of an exercise (collected once per version of the module and its helpers)."""
        ex = self.exercise(exercise)
        path = self.checks_path(ex)
        key = (str(path), checks_version(check_files(self.course, ex)))
        with self._lock:
            return self._checks.get(key) or self._collect(path, key)

    def _collect(self, path: Path, key: tuple[str, int]) -> list[CheckInfo]:
        self._zygote_ready()  # start importing torch in the zygote while the judge collects
        judge = self.ready_judge()
        judge.channel.send({"op": "collect", "module": str(path), "mtime": key[1]})
        try:
            header, _ = judge.channel.recv(timeout=STARTUP_TIMEOUT_S * 2)
        except (EOFError, TimeoutError, ProtocolError) as exc:
            self.restart_judge()
            raise GradingError(f"the judge could not collect {path}: {exc}; see {self._scratch}/judge.log") from exc
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
        return source_notebook(self.course, self.exercise(exercise))

    # -- grading

    def grade(self, notebook: str | Path, exercise: str | Exercise, *,
              only: Collection[str] | None = None) -> NotebookResult:
        """Grade one notebook; never raises for anything the submission does (see the module doc).

        `only` names the checks to run (the others neither run nor count): the course's own proofs of
        the hidden checks ask for the few a misconception targets instead of paying for all of them."""
        with self._lock:
            started = time.monotonic()
            ex = self.exercise(exercise)
            checks = self.checks(ex)
            if only is not None and (unknown := set(only) - {c.name for c in checks}):
                raise GradingError(f"{ex.id} has no checks named {sorted(unknown)}")
            path = Path(notebook).resolve()
            grading = Grading(self, ex, checks, self.checks_path(ex), checks_version(check_files(self.course, ex)),
                              path, NotebookResult(notebook=str(path), exercise=ex.id), started,
                              only=None if only is None else frozenset(only))
            return run_steps(grading)


def grade_notebook(path: str | Path, exercise_id: str | None = None, course: Course | None = None,
                   **grader_options: Any) -> NotebookResult:
    """Grade one notebook with fresh helper processes (a `Grader` is faster for many)."""
    course = course or load_course()
    with Grader(course, **grader_options) as grader:
        return grader.grade(path, exercise_id or infer_exercise(path, course))
