"""Reading a submitted notebook without trusting it: which cells to run, which grade_ids it carries.

Cells are found by nbgrader's `grade_id`, never by position. Autograded test cells (grade=True,
solution=False) are not run: the judge re-asserts what they assert. Everything else runs as the
student left it, in the student's order; missing, duplicated or reordered graded cells become notes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertcourse.errors import BertcourseError


class SubmissionError(BertcourseError):
    """The file cannot be graded at all (not JSON, not a notebook)."""


@dataclass
class CodeCell:
    """One code cell of a submitted notebook."""

    index: int  # position among all cells of the notebook
    source: str
    grade_id: str | None = None
    is_test: bool = False  # an autograded test cell: skipped, the judge re-asserts it

    def to_wire(self) -> dict[str, Any]:
        """What the worker needs of the cell."""
        return {"index": self.index, "grade_id": self.grade_id, "source": self.source}


@dataclass
class NotebookCells:
    """A submitted notebook as grading sees it: its code cells and the grade_ids it carries."""

    code: list[CodeCell]
    grade_ids: list[str] = field(default_factory=list)  # all grade_ids in notebook order (any cell type)

    @property
    def to_run(self) -> list[CodeCell]:
        """The cells the worker runs: every code cell but the autograded test cells."""
        return [c for c in self.code if not c.is_test]


def read_notebook(path: Path, max_bytes: int = 50 * 1024 * 1024) -> NotebookCells:
    """The notebook's cells; SubmissionError saying what is wrong when it is not a usable notebook."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SubmissionError(f"{path}: cannot read the file ({exc.strerror or exc})") from exc
    if size > max_bytes:
        raise SubmissionError(f"{path}: the file is {size // 1024 // 1024} MB, more than a notebook can be")
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError) as exc:
        raise SubmissionError(f"{path}: not a notebook (not valid JSON: {exc})") from exc
    except RecursionError as exc:
        raise SubmissionError(f"{path}: not a notebook (JSON nested too deeply)") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise SubmissionError(f"{path}: not a notebook (JSON without a 'cells' list)")
    if data.get("nbformat") != 4:
        raise SubmissionError(f"{path}: not a version 4 notebook (nbformat={data.get('nbformat')!r})")
    code: list[CodeCell] = []
    grade_ids: list[str] = []
    for index, cell in enumerate(data["cells"]):
        if not isinstance(cell, dict):
            raise SubmissionError(f"{path}: cell {index} is not a JSON object")
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        nbgrader = meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else {}
        grade_id = nbgrader.get("grade_id") if isinstance(nbgrader.get("grade_id"), str) else None
        if grade_id:
            grade_ids.append(grade_id)
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(str(line) for line in source)
        if not isinstance(source, str):
            raise SubmissionError(f"{path}: cell {index} has a source that is not text")
        is_test = bool(nbgrader.get("grade")) and not bool(nbgrader.get("solution"))
        code.append(CodeCell(index, source, grade_id, is_test))
    return NotebookCells(code, grade_ids)


def compare_with_source(submitted: NotebookCells, source: NotebookCells) -> list[tuple[str, str, str | None]]:
    """Notes (kind, message, grade_id) on graded cells missing, duplicated or out of order."""
    notes: list[tuple[str, str, str | None]] = []
    expected = source.grade_ids
    seen: dict[str, int] = {}
    for grade_id in submitted.grade_ids:
        seen[grade_id] = seen.get(grade_id, 0) + 1
    for grade_id in expected:
        if grade_id not in seen:
            notes.append(("missing-cell", f"cell `{grade_id}` is missing from the notebook", grade_id))
    for grade_id, count in seen.items():
        if count > 1:
            notes.append(("duplicate-cell", f"cell `{grade_id}` appears {count} times; the cells run in "
                          "notebook order, so the last one wins", grade_id))
    order = [g for g in dict.fromkeys(submitted.grade_ids) if g in expected]
    if order != [g for g in expected if g in order]:
        notes.append(("reordered-cells", "the graded cells are not in their original order; they ran in "
                      "the order of the notebook", None))
    return notes


def overlap(submitted: NotebookCells, grade_ids: list[str]) -> int:
    """How many of `grade_ids` the submitted notebook carries."""
    return len(set(submitted.grade_ids) & set(grade_ids))
