"""What a batch keeps about each submission: a `Record`, written as its result file, and the CSV of all.

A record holds the scores per graded part, the reasons anything went wrong and the engine's whole
result; `autograded/<student>/<exercise>/bertcourse-result.json` is one record, which a re-run reads
back instead of grading again.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcourse.course import Exercise
from bertcourse.folders import write_atomic
from bertcourse.grading.results import NotebookResult, PartScore

RESULT_NAME = "bertcourse-result.json"
RESULT_FORMAT = 1
# Engine notes about the grading machine rather than the submission: reported once per batch, not per row.
QUIET_NOTES = {"sandbox-unavailable"}


@dataclass
class Record:
    """What the batch keeps about one submission (written as its result file)."""

    student: str
    exercise: str
    notebook: str  # the notebook's name in the exercise
    submission: str  # the graded file, relative to the submissions folder ("" when none)
    key: str
    status: str  # graded (reasons may list cells that failed) | void (could not be graded: score 0, see
    # reasons) | missing (no gradable notebook in the folder, or not an exercise of the course)
    score: float
    max_score: float
    parts: dict[str, float]  # grade_id -> score
    part_max: dict[str, float]
    reasons: list[str]
    result: dict[str, Any]  # the engine's NotebookResult.to_dict() (includes instructor-only detail)
    seconds: float = 0.0
    format: int = RESULT_FORMAT

    def to_json(self) -> str:
        """The result file's text."""
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)


def load_record(path: Path) -> Record | None:
    """The record in a result file; None when it is missing, unreadable or of another format."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != RESULT_FORMAT:
            return None
        return Record(**data)
    except (OSError, ValueError, TypeError):
        return None  # unreadable or from another version: grade again


def empty_result(exercise: Exercise, notebook: str, error: str, cell_points: dict[str, float]) -> dict[str, Any]:
    """A NotebookResult (as a dict) scoring 0 on every part, for a submission that could not run."""
    result = NotebookResult(notebook=notebook, exercise=exercise.id, error=error)
    result.parts = {cell: PartScore(cell, 0.0, points) for cell, points in cell_points.items()}
    result.max_score = sum(cell_points.values())
    return result.to_dict()


def write_csv(path: Path, records: Sequence[Record]) -> None:
    """One row per submission: totals, status and reasons, then one column per graded part."""
    part_columns = list(dict.fromkeys(cell for r in records for cell in r.part_max))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["student", "exercise", "score", "max_score", "status", "reason", *part_columns])
    for r in records:
        writer.writerow([r.student, r.exercise, f"{r.score:g}", f"{r.max_score:g}", r.status,
                         " | ".join(r.reasons), *(f"{r.parts[c]:g}" if c in r.parts else "" for c in part_columns)])
    write_atomic(path, buffer.getvalue())
