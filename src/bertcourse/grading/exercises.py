"""What the course says about an exercise, as grading needs it: its source notebook, its graded cells
and their points, its hidden checks, and which exercise a notebook belongs to.

An exercise's notebook is found in `solutions/` (nbgrader's source, the instructor's) and else in
`exercises/` (the student release); a notebook is recognised by the nbgrader `grade_id`s it carries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bertcourse.course import Course, Exercise, load_course
from bertcourse.errors import BertcourseError
from bertcourse.grading.submission import NotebookCells, SubmissionError, overlap, read_notebook

SOURCE_DIR = "solutions"  # nbgrader's source directory
RELEASE_DIR = "exercises"  # the student release, generated from SOURCE_DIR
# Helpers the hidden checks of every exercise share: a module next to the check modules, which the judge
# puts on the import path of every check module (`from _common import ...`).
SHARED_CHECK_HELPERS = "_common.py"


class GradingError(BertcourseError):
    """A problem on the course side (not the submission's): unknown exercise, broken check module."""


@dataclass(frozen=True)
class CheckInfo:
    """One hidden check as the judge collected it from its `@pytest.mark.check(...)`."""

    name: str
    cell: str  # grade_id of the autograded test cell whose points it carries
    points: float
    feedback: str
    nodeid: str  # pytest's id, which the judge's results are keyed by


def source_notebook(course: Course, exercise: Exercise) -> Path | None:
    """The instructor's notebook (solutions/), else the release (exercises/), else None."""
    for folder in (SOURCE_DIR, RELEASE_DIR):
        path = course.root / folder / exercise.notebook
        if path.is_file():
            return path
    return None


def checks_path(course: Course, exercise: Exercise) -> Path:
    """The exercise's hidden check module; GradingError when it is not there (a student's install)."""
    path = course.path(exercise.checks)
    if not path.is_file():
        raise GradingError(f"the hidden checks {path} do not exist (they live in the course checkout's "
                           "autograder/ folder, not in the student release)")
    return path.resolve()


def check_files(course: Course, exercise: Exercise) -> list[Path]:
    """The files the exercise's hidden checks are made of: their module, and the shared helpers next to
    it when there are any (a grade depends on both)."""
    module = course.path(exercise.checks)
    helpers = module.parent / SHARED_CHECK_HELPERS
    return [module, helpers] if helpers.is_file() else [module]


def checks_version(files: list[Path]) -> int:
    """A number that changes whenever one of the check files does (their latest modification time)."""
    return max(path.stat().st_mtime_ns for path in files)


def exercise_cells(course: Course, exercise: Exercise) -> dict[str, float]:
    """{grade_id: points} of the autograded cells of the exercise's source notebook, in notebook order."""
    path = course.path(f"{SOURCE_DIR}/{exercise.notebook}")
    try:  # plain JSON: nbformat costs seconds to import, and this runs before a batch starts
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GradingError(f"exercise {exercise.id!r}: cannot read {path}: {exc}") from exc
    cells = {}
    for index, cell in enumerate(nb.get("cells", [])):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            if "points" not in meta:
                raise GradingError(f"{path}: cell {index} ({meta.get('grade_id')}) is graded but has no points")
            cells[meta["grade_id"]] = float(meta["points"])
    return cells


def _closest_exercise(course: Course, cells: NotebookCells, skip: str | None = None) -> tuple[str | None, int]:
    """(id, shared grade_ids) of the exercise whose notebook shares the most grade_ids with `cells`
    (none shared: (None, 0)), leaving out the exercise `skip`."""
    best, best_overlap = None, 0
    for exercise in course.exercises:
        source = source_notebook(course, exercise) if exercise.id != skip else None
        shared = overlap(cells, read_notebook(source).grade_ids) if source else 0
        if shared > best_overlap:
            best, best_overlap = exercise.id, shared
    return best, best_overlap


def wrong_exercise(course: Course, cells: NotebookCells, exercise: Exercise, checks: list[CheckInfo]) -> str | None:
    """Why this notebook is not `exercise` (judging by the grade_ids it carries), or None."""
    if not cells.grade_ids:
        return None  # no nbgrader metadata at all: every code cell runs (and a note says so)
    source = source_notebook(course, exercise)
    expected = read_notebook(source).grade_ids if source else sorted({c.cell for c in checks})
    ours = overlap(cells, expected)
    best, best_overlap = _closest_exercise(course, cells, skip=exercise.id)
    # Shared names (a `setup` cell) may overlap a little: it takes a clear majority to call it another's.
    if best is not None and ours * 2 < best_overlap:
        return f"this notebook belongs to exercise {best!r}, not {exercise.id!r} (judging by its graded cells)"
    if ours == 0:
        return f"this notebook is not exercise {exercise.id!r}: none of its graded cells belong to that exercise"
    return None


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
        best, _ = _closest_exercise(course, cells)
        if best:
            return best
    resolved = str(path.resolve())
    for exercise in course.exercises:
        if resolved.endswith("/" + exercise.notebook) or exercise.id in path.resolve().parts:
            return exercise.id
    known = ", ".join(e.id for e in course.exercises)
    raise GradingError(f"{path}: cannot tell which exercise this notebook is; pass --exercise (one of {known})")
