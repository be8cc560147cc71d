"""Prove hidden checks in the course's own tests: grade implementations given as source strings.

    from bertcourse.authoring.proofs import grade_source, run_check_module

    result = grade_source("autograder/checks/ex01_masking.py", WRONG_SOURCE)   # -> NotebookResult
    assert "test_specials_never_masked" in result.failed_checks()
    assert run_check_module("autograder/checks/ex01_masking.py", CORRECT_SOURCE) == {name: True, ...}

A tiny notebook is built on the fly: the source (one string, or {grade_id: source} for several solution
cells, in order) as nbgrader solution cells, followed by one empty autograded test cell per `cell=`
the check module names. It is graded by the real engine (worker, sandbox, judge), so a proof here is a
proof of what a student's notebook would get. One `Grader` is shared by all calls of a test session.
"""

from __future__ import annotations

import atexit
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path

from bertcourse.course import Course, Exercise, load_course
from bertcourse.grading.engine import Grader
from bertcourse.grading.results import NotebookResult

_shared: Grader | None = None


def shared_grader(course: Course | None = None) -> Grader:
    """One Grader for the whole test session (closed at exit); its zygote and judge stay warm."""
    global _shared
    if _shared is None or (course is not None and _shared.course.root != course.root):
        if _shared is not None:
            _shared.close()
        _shared = Grader(course or load_course())
        atexit.register(_shared.close)
    return _shared


def notebook_json(sources: Mapping[str, str], test_cells: list[str]) -> dict:
    """An nbformat-4 notebook: solution cells from `sources`, then one locked test cell per id."""
    cells = []
    for grade_id, source in sources.items():
        cells.append(_cell(source, grade_id, solution=True))
    for grade_id in test_cells:
        cells.append(_cell("# hidden checks run here", grade_id, grade=True, points=0.0))
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}


def _cell(source: str, grade_id: str, solution: bool = False, grade: bool = False, points: float | None = None) -> dict:
    """One nbgrader code cell with its metadata."""
    meta = {"grade_id": grade_id, "solution": solution, "grade": grade, "locked": grade, "schema_version": 3,
            "task": False}
    if points is not None:
        meta["points"] = points
    return {"cell_type": "code", "execution_count": None, "id": grade_id.replace("_", "-")[:64],
            "metadata": {"nbgrader": meta}, "outputs": [], "source": source}


def grade_source(checks: str | Path, sources: str | Mapping[str, str], *, course: Course | None = None,
               time_limit_s: float = 300, check_time_limit_s: float = 60, memory_limit_mb: int = 4096,
               part_time_limit_s: float | None = None, grader: Grader | None = None,
               only: set[str] | None = None) -> NotebookResult:
    """Grade `sources` against the check module `checks` (a path, relative to the course root or
    absolute) and return the full result (`.failed_checks()`, `.check(name).message`, `.score`).
    `only`: run just these checks (a proof about a few checks need not pay for all of them)."""
    grader = grader or shared_grader(course)
    path = Path(checks) if Path(checks).is_absolute() else grader.course.root / checks
    if isinstance(sources, str):
        sources = {"solution": sources}
    exercise = Exercise(id=f"test-{path.stem}", title=f"proof of {path.name}", notebook="", points=0.0,
                        checks=str(path.resolve()), time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb,
                        check_time_limit_s=check_time_limit_s, part_time_limit_s=part_time_limit_s)
    cells = list(dict.fromkeys(check.cell for check in grader.checks(exercise)))
    with tempfile.TemporaryDirectory(prefix="bertcourse-proof-") as folder:
        notebook = Path(folder) / "submission.ipynb"
        notebook.write_text(json.dumps(notebook_json(sources, cells)))
        return grader.grade(notebook, exercise, only=only)


def run_check_module(checks: str | Path, source: str | Mapping[str, str], only: set[str] | None = None,
                     **options) -> dict[str, bool]:
    """{check name: passed} for `source` judged by `checks` (all checks, or only those named in `only`,
    which are then the only ones run)."""
    result = grade_source(checks, source, only=only, **options)
    if result.error:
        raise AssertionError(f"grading {checks} did not run: {result.error}")
    return {c.name: c.passed for c in result.checks}
