"""Grading lanes: the processes of a batch that grade submissions, each with its own engine.

A lane only returns `Record`s (and writes each submission's feedback page); the parent alone writes
the gradebook. Parallel lanes are forked processes (`GradingLanes`); with one lane, the parent grades
in-process. Each process keeps its engine in `_lane_state`, started once and closed when the lane ends.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.util import Finalize
from pathlib import Path
from typing import Any

from bertcourse.course import Course, Exercise
from bertcourse.errors import BertcourseError
from bertcourse.grading.batch.feedback import FEEDBACK_MODE, warm_up, write_feedback
from bertcourse.grading.batch.layout import Job
from bertcourse.grading.batch.records import QUIET_NOTES, Record, empty_result, without_paths
from bertcourse.grading.engine import Grader
from bertcourse.grading.results import NotebookResult
from bertcourse.progress import progress_bar

# What one lane grades: (course, job, {grade_id: points} of the exercise, submissions folder, feedback folder,
# the feedback pages' permissions).
Task = tuple[Course, Job, dict[str, float], Path, Path, int]

_lane_state: dict[str, Any] = {}  # this process's lane: its engine's Grader ("grader")


def summarise(job: Job, result: NotebookResult, cell_points: dict[str, float], seconds: float,
              submissions: Path) -> Record:
    """A Record from the engine's result: per-part scores over the exercise's graded cells."""
    parts = {cell: 0.0 for cell in cell_points}
    for cell, part in result.parts.items():
        if cell in parts or not cell_points:
            parts[cell] = float(part.score) if not result.error else 0.0
    reasons = list(job.notes)
    if result.error:
        reasons.append(result.error)
    reasons += [note.message for note in result.notes if note.kind not in QUIET_NOTES]
    status = "missing" if job.problem else ("void" if result.error else "graded")
    part_max = dict(cell_points) or {c: float(p.max_score) for c, p in result.parts.items()}
    return Record(
        student=job.student,
        exercise=job.exercise_id,
        notebook=job.notebook_name,
        submission=str(job.notebook.relative_to(submissions)) if job.notebook else "",
        key=job.key,
        status=status,
        score=round(sum(parts.values()), 6),
        max_score=round(sum(part_max.values()), 6),
        parts=parts,
        part_max=part_max,
        reasons=reasons,
        result=result,
        seconds=round(seconds, 3),
        submitted_at=job.submitted_at,
    )


def _lane_grader(course: Course) -> Grader:
    if "grader" in _lane_state and _lane_state["grader"].course.root != course.root:
        close_lane()
    if "grader" not in _lane_state:
        grader = Grader(course)
        _lane_state["grader"] = grader
        # Closes the engine's helper processes when the lane exits: atexit does not run in
        # multiprocessing children, multiprocessing's own finalizers do (and in the parent at exit).
        Finalize(None, grader.close, exitpriority=10)  # closing twice is harmless
    return _lane_state["grader"]


def _start_lane(course: Course, exercise_ids: list[str]) -> None:
    """Start a lane's engine before the first submission arrives (the feedback pages' code is loaded already:
    the parent warmed it up before forking)."""
    _lane_state.clear()  # a forked lane starts without the parent's engine: its helpers belong to the parent
    # The parent decides when a batch stops: Ctrl-C interrupts it, and it ends the lanes with SIGTERM,
    # on which a lane closes its engine (helpers and temporary folder) and leaves at once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_lane)
    grader = _lane_grader(course)
    for exercise_id in exercise_ids:
        try:
            grader.checks(exercise_id)  # starts the zygote and the judge, which collects the checks
        except BertcourseError:
            pass  # reported where it matters: on the submissions of that exercise
    warm_up()  # a no-op after the parent's


def close_lane() -> None:
    """Close this process's engine, if it has one."""
    grader = _lane_state.pop("grader", None)
    if grader is not None:
        grader.close()


def _end_lane(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM (the pool sends its own) must not cut this short
    try:
        close_lane()
    finally:
        os._exit(128 + signum)


def grade_job(course: Course, job: Job, cell_points: dict[str, float], submissions: Path,
              feedback_root: Path, feedback_mode: int = FEEDBACK_MODE) -> Record:
    """Grade one submission and write its feedback page; never raises for a bad submission."""
    start = time.monotonic()
    if job.problem:
        result = empty_result(exercise_or_stub(course, job), job.notebook_name, job.problem, cell_points)
    else:
        exercise = course.exercise(job.exercise_id)
        try:
            result = _lane_grader(course).grade(job.notebook, exercise)
        except BertcourseError as exc:  # e.g. not a notebook: the engine says what is wrong
            result = empty_result(exercise, job.notebook_name, str(exc), cell_points)
        except Exception as exc:  # a bug in the grader must not stop the class's batch
            result = empty_result(exercise, job.notebook_name,
                                  f"the autograder failed on this submission ({type(exc).__name__}: {exc}); "
                                  "ask the instructor to look at it", cell_points)
    if job.notebook is not None:  # reasons name the submission by its file name, never the instructor's folders
        result = without_paths(result, {str(job.notebook.resolve()), str(job.notebook)}, job.notebook.name)
    record = summarise(job, result, cell_points, time.monotonic() - start, submissions)
    write_feedback(feedback_root / job.student / job.exercise_id, record, job.notebook, feedback_mode)
    return record


def exercise_or_stub(course: Course, job: Job) -> Exercise:
    """The job's exercise, or a stand-in with its id when the course has no such exercise."""
    try:
        return course.exercise(job.exercise_id)
    except BertcourseError:
        return Exercise(id=job.exercise_id, title="", notebook="", points=0.0, checks="")


def _grade_task(task: Task) -> Record:
    return grade_job(*task)


class GradingLanes:
    """Grades tasks in `jobs` lanes; iterating yields each Record as soon as it is ready.

    Parallel lanes are forked processes, each with its own engine. They are forked here, before the
    caller opens the gradebook (no database connection crosses a fork, and the lanes start their
    engines while the parent does that) and before the progress bar starts its thread, but after the
    parent has loaded the code of the feedback pages (nbconvert, nbgrader, matplotlib's mathtext:
    ~5 s of CPU, mostly a grammar that jsonschema's IRI format builds on import), which the lanes
    then share instead of each loading it again.
    """

    def __init__(self, course: Course, tasks: list[Task], jobs: int, progress: bool,
                 exercise_ids: list[str] | None = None):
        """With no `tasks` but the `exercise_ids` to expect, the lanes start now and grade what `fed` hands
        them later (several graders sharing a class, claims.py)."""
        self.tasks, self.progress, self.jobs = tasks, progress, jobs
        self.pool: concurrent.futures.ProcessPoolExecutor | None = None
        self.pending: dict[concurrent.futures.Future, Task] = {}
        if jobs > 1 and (len(tasks) > 1 or exercise_ids is not None):
            if exercise_ids is None:
                exercise_ids = sorted({task[1].exercise_id for task in tasks if not task[1].problem})
            warm_up()
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=min(jobs, len(tasks)) if tasks else jobs, mp_context=multiprocessing.get_context("fork"),
                initializer=_start_lane, initargs=(course, exercise_ids))
            self.pending = {self.pool.submit(_grade_task, task): task for task in tasks}
            if not tasks:
                self.pool.submit(os.getpid)  # a pool forks its lanes on its first task: now, as above

    def __iter__(self) -> Iterator[Record]:
        with progress_bar(total=len(self.tasks), unit="nb", desc="grading", disable=not self.progress or not self.tasks,
                  file=sys.stderr) as bar:
            if self.pool is None:
                for task in self.tasks:
                    bar.set_postfix_str(task[1].label, refresh=False)
                    yield _grade_task(task)
                    bar.update()
                return
            for future in concurrent.futures.as_completed(self.pending):
                yield self._record(future)
                bar.update()

    def _record(self, future: concurrent.futures.Future) -> Record:
        task = self.pending[future]
        try:
            return future.result()
        except Exception as exc:  # the lane itself died: say so, and grade it again on the next run
            course, job, cell_points, submissions, *_ = task
            result = empty_result(exercise_or_stub(course, job), job.notebook_name,
                                  f"the grading lane failed ({type(exc).__name__}: {exc})", cell_points)
            record = summarise(job, result, cell_points, 0.0, submissions)
            record.key = ""
            return record

    def fed(self, feed: Callable[[bool], Task | None]) -> Iterator[Record]:
        """Grade the tasks `feed` hands out, one per free lane, yielding each Record as soon as it is ready.

        `feed(wait)` returns the next task or None: with wait=False (lanes still busy here) when it has
        none right now; with wait=True (nothing in flight here) only when there will be none, so it may
        wait for one. It is asked only from this process, never while a lane's result waits to be taken.
        """
        with progress_bar(unit="nb", desc="grading", disable=not self.progress, file=sys.stderr) as bar:
            if self.pool is None:
                while (task := feed(True)) is not None:
                    bar.set_postfix_str(task[1].label, refresh=False)
                    yield _grade_task(task)
                    bar.update()
                return
            while True:
                while len(self.pending) < self.jobs and (task := feed(not self.pending)) is not None:
                    self.pending[self.pool.submit(_grade_task, task)] = task
                if not self.pending:
                    return
                done, _ = concurrent.futures.wait(self.pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    yield self._record(future)
                    del self.pending[future]
                    bar.update()

    def close(self) -> None:
        """Wait for the lanes to finish what they hold, then end them."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def terminate(self) -> None:
        """End the lanes now (each closes its engine on SIGTERM), without waiting for their notebooks."""
        if self.pool is None:
            return
        processes = list(getattr(self.pool, "_processes", {}).values())
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = None
