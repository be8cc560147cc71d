"""The gradings of the course's own notebooks (solutions, releases), made once per test process.

Several tests need the same grading: the proof files' release and solution tests, `validate_course` over the
real exercises, self-grading. Grading a notebook is deterministic (the worker seeds every run, the judge
every check), so one grading per notebook's bytes, exercise and check-module version answers them all.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from bertcourse.authoring.proofs import shared_grader
from bertcourse.course import Course, Exercise
from bertcourse.grading.exercises import check_files, checks_version
from bertcourse.grading.results import NotebookResult

ROOT = Path(__file__).resolve().parents[2]
_results: dict[tuple, NotebookResult] = {}


def graded_notebook(notebook: str | Path, exercise: str | Exercise, course: Course | None = None) -> NotebookResult:
    """The result of grading `notebook` (a path, relative to the course root or absolute) as `exercise`, graded
    by the session's shared grader the first time and read back afterwards. Do not modify what it returns."""
    grader = shared_grader(course)
    ex = grader.exercise(exercise)
    path = Path(notebook) if Path(notebook).is_absolute() else grader.course.root / notebook
    key = (str(grader.course.root), repr(ex), hashlib.sha256(path.read_bytes()).hexdigest(),
           checks_version(check_files(grader.course, ex)))
    if key not in _results:
        _results[key] = grader.grade(path, ex)
    return _results[key]


class SharedGrading:
    """Stands in for `validate_course`'s Grader: its checks from the shared grader, its gradings from
    `graded_notebook`, so validating the real course regrades nothing another test graded already."""

    def __init__(self, course: Course):
        self.course = course
        self.grader = shared_grader(course)

    def __enter__(self) -> SharedGrading:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass  # the shared grader stays warm for the rest of the session

    def checks(self, exercise: str | Exercise):
        return self.grader.checks(exercise)

    def grade(self, notebook: str | Path, exercise: str | Exercise) -> NotebookResult:
        return graded_notebook(notebook, exercise, self.course)
