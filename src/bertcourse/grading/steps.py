"""The steps of grading one notebook, in the order they run: `GRADING_STEPS`.

Like nbgrader's list of preprocessors, each step is a small function with one job that reads and
adds to the `Grading` of one notebook. A step that finds the grade void raises `VoidGrade`; the
steps after it do not run, and every check scores 0 with that reason. `finish` always runs last.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bertcourse.course import Course, Exercise
from bertcourse.grading.exercises import CheckInfo, source_notebook, wrong_exercise
from bertcourse.grading.processes import JudgeProcess
from bertcourse.grading.protocol import Channel, ProtocolError
from bertcourse.grading.results import CheckResult, NotebookResult
from bertcourse.grading.session import GRACE_S, NotebookSession, WorkerSettings
from bertcourse.grading.submission import NotebookCells, SubmissionError, compare_with_source, read_notebook


class HelperProcesses(Protocol):
    """What the steps need of the Grader that runs them: its warm helper processes."""

    course: Course
    worker_settings: WorkerSettings

    def ready_judge(self) -> JudgeProcess:
        """The judge process, started when needed."""

    def restart_judge(self) -> None:
        """Kill the judge; the next `ready_judge` starts a new one."""

    def fork_worker(self, request: dict[str, Any], preload: list[str]) -> tuple[int, Channel]:
        """A new worker for one notebook: its pid and a channel to it."""


class VoidGrade(Exception):  # noqa: N818 - a verdict, not an error
    """The grade is void for the reason given: every check scores 0 and `result.error` says why."""


@dataclass
class Grading:
    """One notebook's grading, passed from step to step."""

    helpers: HelperProcesses
    exercise: Exercise
    checks: list[CheckInfo]
    checks_file: Path
    checks_version: int  # changes with the check module or its shared helpers (exercises.checks_version)
    path: Path
    result: NotebookResult
    started: float = field(default_factory=time.monotonic)
    only: frozenset[str] | None = None  # the checks to run and score (None: all of them)
    cells: NotebookCells | None = None  # set by read_submission
    session: NotebookSession | None = None  # set by run_hidden_checks: the notebook's worker
    nonce: str = ""  # what the canary check must fail with
    judge_report: dict[str, Any] = field(default_factory=dict)  # the judge's `done` message

    @property
    def selected(self) -> list[CheckInfo]:
        """The checks this grading runs and scores: all of them, or those named in `only`."""
        return self.checks if self.only is None else [c for c in self.checks if c.name in self.only]


# ----------------------------------------------------------------------------- the steps


def read_submission(grading: Grading) -> None:
    """Read the notebook's cells without trusting them; void when it is not a usable notebook."""
    try:
        grading.cells = read_notebook(grading.path)
    except SubmissionError as exc:
        raise VoidGrade(str(exc)) from None


def identify_exercise(grading: Grading) -> None:
    """Void the grade of another exercise's notebook (judging by the grade_ids it carries)."""
    assert grading.cells is not None
    try:
        problem = wrong_exercise(grading.helpers.course, grading.cells, grading.exercise, grading.checks)
    except SubmissionError as exc:  # a source notebook that cannot be read
        problem = str(exc)
    if problem:
        raise VoidGrade(problem)


def note_cell_changes(grading: Grading) -> None:
    """Notes on graded cells missing, duplicated or reordered against the source notebook."""
    assert grading.cells is not None
    result = grading.result
    if not grading.cells.grade_ids:
        result.add_note("no-metadata", "the notebook carries no nbgrader cell metadata; every code cell ran")
        return
    source = source_notebook(grading.helpers.course, grading.exercise)
    if source is not None:
        for kind, message, grade_id in compare_with_source(grading.cells, read_notebook(source)):
            result.add_note(kind, message, grade_id)


def run_hidden_checks(grading: Grading) -> None:
    """Run the hidden checks in the judge, relaying its requests to the notebook's worker."""
    assert grading.cells is not None
    helpers, ex = grading.helpers, grading.exercise
    session = grading.session = NotebookSession(
        helpers.worker_settings, helpers.fork_worker, ex, grading.cells, grading.path.parent, grading.checks_file,
        grading.result, {c.name: c.cell for c in grading.selected})
    try:
        grading.nonce = secrets.token_hex(8)
        grading.judge_report = _judge_dialogue(grading, session)
    finally:
        session.close()


def _judge_dialogue(grading: Grading, session: NotebookSession) -> dict[str, Any]:
    """Serve the judge's session (begin_check, rpc) until it is done; its `done` message."""
    ex = grading.exercise
    judge = grading.helpers.ready_judge()
    limits = {"check_time_limit_s": ex.check_time_limit_s, "memory_limit_mb": ex.memory_limit_mb,
              "time_limit_s": ex.time_limit_s}
    started = time.monotonic()
    slack = 60 + len(grading.selected) * (GRACE_S + 1)
    budget = session.bound_s()
    internal = None
    try:
        module = grading.checks_file
        judge.channel.send({"op": "run", "module": str(module), "mtime": grading.checks_version,
                            "limits": limits, "nonce": grading.nonce,
                            "only": None if grading.only is None else sorted(grading.only)})
        while True:
            judge_deadline = started + budget + session.budgets.uncharged_s + slack
            header, blob = judge.channel.recv(timeout=max(judge_deadline - time.monotonic(), 1.0))
            op = header.get("op")
            if op == "done":
                session.end_checks()
                break
            try:
                if op == "begin_check":
                    reply = {"unavailable": session.begin_check(str(header.get("name")))}, b""
                else:
                    reply = session.relay(header.get("request", {}), blob)
            except Exception as exc:  # an engine bug or a dead zygote: void the grade, keep the judge in step
                internal = f"internal grading error: {type(exc).__name__}: {exc}"
                lost = {"unavailable": internal} if op == "begin_check" else {"kind": "lost", "reason": internal}
                reply = lost, b""
            judge.channel.send(*reply)
    except (EOFError, TimeoutError, ProtocolError, OSError) as exc:
        grading.helpers.restart_judge()
        raise VoidGrade(f"internal grading error: the judge stopped ({exc})") from None
    if internal:
        raise VoidGrade(internal)
    return header


def score_checks(grading: Grading) -> None:
    """One CheckResult per hidden check from the judge's report; void unless the canary failed as it must."""
    result, report = grading.result, grading.judge_report
    by_nodeid = {r["nodeid"]: r for r in report.get("results", [])}
    for problem in report.get("problems", []):
        result.add_note("check-problem", problem)
    for info in grading.selected:
        ran = by_nodeid.get(info.nodeid)
        passed = bool(ran and ran.get("passed"))
        message = "" if passed else (ran or {}).get("message") or "the check did not run"
        hint = (ran or {}).get("hint") or info.feedback  # a Diagnosis of what the code did, else the check's own
        result.checks.append(CheckResult(info.name, info.cell, info.points if passed else 0.0, info.points,
                                         passed, hint, message, (ran or {}).get("detail", "")))
    result.error = canary_problem(report.get("results", []), grading.nonce)


GRADING_STEPS = (read_submission, identify_exercise, note_cell_changes, run_hidden_checks, score_checks)


# ----------------------------------------------------------------------------- around the steps


def canary_problem(results: list[dict[str, Any]], nonce: str) -> str | None:
    """Why a judge session's results cannot be trusted, judging by its canary (None when they can)."""
    canary = [r for r in results if r.get("canary")]
    if len(canary) != 1 or canary[0].get("passed") or canary[0].get("message") != nonce:
        return ("the canary check did not fail as it must, so the checks did not really run; "
                "the grade is void")
    return None


def void(result: NotebookResult, checks: list[CheckInfo], reason: str) -> None:
    """Every check scores 0 with `reason`, which becomes the result's error."""
    result.error = reason
    result.checks = [CheckResult(c.name, c.cell, 0.0, c.points, False, c.feedback, f"not graded: {reason}")
                     for c in checks]


def finish(grading: Grading) -> NotebookResult:
    """The cells' records, the duration and the totals; a refused sandbox voids the grade."""
    result, session = grading.result, grading.session
    if session is not None:
        if session.refused:
            result.error = session.refused
        result.cells = [session.cell_records[i] for i in sorted(session.cell_records)]
    result.duration_s = round(time.monotonic() - grading.started, 3)
    result.total()
    return result


def run_steps(grading: Grading) -> NotebookResult:
    """Run GRADING_STEPS in order (a void grade stops them), then `finish`."""
    try:
        for step in GRADING_STEPS:
            step(grading)
    except VoidGrade as verdict:
        void(grading.result, grading.selected, str(verdict))
    return finish(grading)
