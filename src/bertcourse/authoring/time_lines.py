"""Each exercise's expected time, written at the top of its notebook from course.yml (`expected_minutes`), so that
the notebook and the README's table (`notebook.contents_table`) cannot drift apart. Run by `make setup-cells`;
`bertcourse release` carries the line to exercises/."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import nbformat

from bertcourse.course import Exercise, load_course

# The line begins with this marker, so that a later run finds and replaces it (and a test reads it back).
MARKER = "**Expected time:**"
_LINE = re.compile(r"^" + re.escape(MARKER) + r".*$", re.MULTILINE)


def time_line(exercise: Exercise) -> str:
    """The line a notebook shows under its title: the estimate of course.yml and what it covers."""
    if exercise.expected_minutes is None:
        raise ValueError(f"exercise {exercise.id!r} has no expected_minutes in course.yml")
    return (f"{MARKER} about {exercise.expected_minutes} minutes for a student who has done the lessons (the "
            "course's estimate for reading, writing and testing every part; course.yml).")


def place_time_line(source: str, line: str) -> str:
    """`source` (the notebook's first markdown cell) with `line` in place: replacing an earlier time line, else
    as a paragraph of its own after the Colab badge (or after the title when there is no badge)."""
    if _LINE.search(source):
        return _LINE.sub(lambda _: line, source, count=1)
    paragraphs = source.split("\n\n")
    after = next((i for i, text in enumerate(paragraphs) if "colab-badge" in text), 0)
    paragraphs.insert(after + 1, line)
    return "\n\n".join(paragraphs)


def read_time_line(notebook: object) -> str | None:
    """The time line of an nbformat notebook's first markdown cell, or None."""
    cell = next((c for c in notebook.cells if c.cell_type == "markdown"), None)  # type: ignore[attr-defined]
    found = _LINE.search(cell.source) if cell is not None else None
    return found.group(0) if found else None


def write_time_lines(exercise_ids: Iterable[str] | None = None, root: str | Path | None = None) -> list[Path]:
    """Write `time_line` into the solution notebook of each exercise (all of course.yml's when `exercise_ids` is
    None); returns the notebooks it changed. Run `bertcourse release` afterwards to carry them to exercises/."""
    course = load_course(root)
    chosen = [course.exercise(name) for name in exercise_ids] if exercise_ids is not None else course.exercises
    changed = []
    for exercise in chosen:
        path = course.root / "solutions" / exercise.notebook
        notebook = nbformat.read(path, as_version=4)
        cell = next(c for c in notebook.cells if c.cell_type == "markdown")
        source = place_time_line(cell.source, time_line(exercise))
        if source != cell.source:
            cell.source = source
            nbformat.write(notebook, path)
            changed.append(path)
    return changed
