"""`bertcourse validate`: is the course fit to hand out? For instructors and CI (`make validate`).

An exercise is valid when its solution scores full marks, its blank release scores zero on every
graded part (a hidden check that passes without student code measures nothing), its committed release is
what `bertcourse release` would write, and its points agree in three places: the hidden checks, the
notebook's autograded cells and course.yml. A lesson is valid when it executes from top to bottom.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbclient
import nbformat

from bertcourse.authoring.release import stale_release
from bertcourse.course import PROFILE_VARIABLE, Course, Exercise, Lesson, load_course, resolve_profile
from bertcourse.errors import BertcourseError
from bertcourse.grading.engine import Grader
from bertcourse.grading.exercises import RELEASE_DIR, SOURCE_DIR, exercise_cells
from bertcourse.notebook import execute_notebook


@dataclass
class ValidationRow:
    """One line of `bertcourse validate`'s table: one claim about one exercise or lesson, and whether it holds."""

    item: str  # exercise or lesson id
    claim: str  # e.g. "solution scores full marks"
    ok: bool
    detail: str = ""
    seconds: float = 0.0


def _close(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9


def points_rows(course: Course, exercise: Exercise, grader: Grader) -> list[ValidationRow]:
    """Hidden checks' points per cell == the cell's points in the notebook; their sum == course.yml's points."""
    cells = exercise_cells(course, exercise)
    by_cell: dict[str, float] = {}
    for check in grader.checks(exercise):
        by_cell[check.cell] = by_cell.get(check.cell, 0.0) + float(check.points)
    problems = []
    for cell in sorted(set(cells) | set(by_cell)):
        if cell not in cells:
            problems.append(f"hidden checks give {by_cell[cell]:g} points to cell {cell!r}, which is not an autograded "
                            "cell of the notebook")
        elif cell not in by_cell:
            problems.append(f"autograded cell {cell!r} ({cells[cell]:g} points) has no hidden check")
        elif not _close(cells[cell], by_cell[cell]):
            problems.append(f"cell {cell!r} is worth {cells[cell]:g} points in the notebook but its hidden checks add "
                            f"up to {by_cell[cell]:g}")
    total = sum(cells.values())
    if not _close(total, exercise.points):
        problems.append(f"the autograded cells add up to {total:g} points, course.yml says {exercise.points:g}")
    detail = "; ".join(problems) or f"{len(cells)} parts, {total:g} points"
    return [ValidationRow(exercise.id, "points add up", not problems, detail)]


def _graded(grader: Grader, path: Path, exercise: Exercise) -> tuple[Any, float]:
    start = time.monotonic()
    return grader.grade(path, exercise), time.monotonic() - start


def solution_row(course: Course, exercise: Exercise, grader: Grader) -> ValidationRow:
    """The solution notebook scores full marks."""
    path = course.path(f"{SOURCE_DIR}/{exercise.notebook}")
    result, seconds = _graded(grader, path, exercise)
    failed = [f"{c.name} ({c.message or c.feedback})" for c in result.checks if not c.passed]
    ok = result.error is None and not failed and _close(result.score, exercise.points)
    detail = f"{result.score:g} / {exercise.points:g}"
    if result.error:
        detail += f": {result.error}"
    if failed:
        detail += ": failed " + "; ".join(failed)
    return ValidationRow(exercise.id, "solution scores full marks", ok, detail, seconds)


def release_row(course: Course, exercise: Exercise, grader: Grader) -> ValidationRow:
    """The student release scores zero on every graded part (no hidden check passes without student code)."""
    path = course.path(f"{RELEASE_DIR}/{exercise.notebook}")
    if not path.is_file():
        return ValidationRow(exercise.id, "release scores zero", False,
                             f"{path} does not exist; run bertcourse release")
    result, seconds = _graded(grader, path, exercise)
    passing = [f"{c.name} (part {c.cell})" for c in result.checks if c.passed]
    scored = {cell: part.score for cell, part in result.parts.items() if part.score > 0}
    ok = result.error is None and not passing and not scored
    if result.error:
        detail = f"could not grade the release: {result.error}"
    elif passing:
        detail = "hidden checks pass on the blank notebook: " + "; ".join(passing)
    else:
        detail = f"0 / {result.max_score:g}"
    return ValidationRow(exercise.id, "release scores zero", ok, detail, seconds)


def release_current_row(course: Course, exercise: Exercise) -> ValidationRow:
    """The committed release is what `bertcourse release` would write."""
    start = time.monotonic()
    problems = stale_release(course, [exercise.id])
    return ValidationRow(exercise.id, "release up to date", not problems,
                         "; ".join(problems) or "exercises/ matches", time.monotonic() - start)


def lesson_row(course: Course, lesson: Lesson, cell_timeout: float) -> ValidationRow:
    """Execute the lesson with nbclient in its own folder, with the quick profile unless one is set."""
    path = course.path(lesson.notebook)
    start = time.monotonic()
    profile = resolve_profile(None, course, use_gpu=False)  # the kernel inherits the environment
    try:
        nb = nbformat.read(path, as_version=4)
        env = {PROFILE_VARIABLE: profile, "BERTCOURSE_ROOT": str(course.root)}
        execute_notebook(nb, path.parent, cell_timeout, env)
        ok, detail = True, f"ran with profile {profile}"
    except nbclient.exceptions.CellExecutionError as exc:
        ok, detail = False, _cell_error(nb, exc)
    except nbclient.exceptions.CellTimeoutError as exc:
        ok, detail = False, f"a cell ran longer than {cell_timeout:g} s: {str(exc).splitlines()[0]}"
    except Exception as exc:  # no kernel, unreadable notebook, ...: the lesson cannot run either way
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    return ValidationRow(lesson.id, "lesson executes", ok, detail, time.monotonic() - start)


def _cell_error(nb: Any, exc: Exception) -> str:
    index = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                  and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
    name = getattr(exc, "ename", type(exc).__name__)
    value = getattr(exc, "evalue", "")
    where = f"cell {index}" if index is not None else "a cell"
    return f"{where} raised {name}: {value}"


def validate_course(course: Course, only: Sequence[str] | None = None, skip_lessons: bool = False,
                    lesson_timeout: float = 600,
                    report: Callable[[ValidationRow], None] | None = None) -> list[ValidationRow]:
    """Every validation row of the course (or of the items named in `only`), each passed to `report` when made."""
    known = {e.id for e in course.exercises} | {lesson.id for lesson in course.lessons}
    for item in only or []:
        if item not in known:
            raise BertcourseError(f"unknown exercise or lesson {item!r}; course.yml defines {', '.join(sorted(known))}")
    exercises = [e for e in course.exercises if not only or e.id in only]
    lessons = [] if skip_lessons else [lesson for lesson in course.lessons if not only or lesson.id in only]
    rows: list[ValidationRow] = []

    def add(row: ValidationRow) -> None:
        rows.append(row)
        if report:
            report(row)

    if exercises:
        with Grader(course) as grader:
            for exercise in exercises:
                for step in (points_rows, solution_row, release_row):
                    try:
                        produced = step(course, exercise, grader)
                    except BertcourseError as exc:  # e.g. a hidden-check module that does not import
                        produced = ValidationRow(exercise.id, step.__name__.replace("_row", "").replace("_", " "),
                                                 False, str(exc))
                    for row in produced if isinstance(produced, list) else [produced]:
                        add(row)
                add(release_current_row(course, exercise))
    for lesson in lessons:
        add(lesson_row(course, lesson, lesson_timeout))
    return rows


def format_row(row: ValidationRow, width: int) -> str:
    """One row of the table `bertcourse validate` prints."""
    return f"{'PASS' if row.ok else 'FAIL'}  {row.item:<{width}}  {row.claim:<27} {row.seconds:6.1f}s  {row.detail}"


def validate_command(args: Any) -> int:
    """`bertcourse validate [--only ID] [...]` (arguments: cli.py); exit status 1 when a row fails."""
    course = load_course()
    ids = [e.id for e in course.exercises] + [lesson.id for lesson in course.lessons]
    width = max([len(i) for i in ids] + [4])
    print(f"{'':4}  {'item':<{width}}  {'claim':<27} {'time':>7}  detail")
    rows = validate_course(course, args.only, args.skip_lessons, args.lesson_timeout,
                      report=lambda row: print(format_row(row, width), flush=True))
    failed = [row for row in rows if not row.ok]
    if not rows:
        print("nothing to validate: course.yml lists no exercises or lessons")
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
