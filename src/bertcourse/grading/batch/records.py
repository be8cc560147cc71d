"""What a batch keeps about each submission: a `Record`, written as its result file, and the CSV of all.

A record is the engine's `NotebookResult` (the one result shape of every grading front end: `bertcourse
grade` prints it, `--json` writes it, self-grading reads it) with what the batch adds: the scores per
graded part of the exercise, the reasons anything went wrong, the submission's key.
`autograded/<student>/<exercise>/bertcourse-result.json` is one record, which a re-run reads back
instead of grading again.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertcourse.course import Exercise
from bertcourse.folders import write_atomic
from bertcourse.grading.results import NotebookResult, PartScore

RESULT_NAME = "bertcourse-result.json"
RESULT_FORMAT = 2  # 2: `result` is a NotebookResult (read with from_dict), not a loose dict
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
    result: NotebookResult  # the engine's result (includes the instructor-only `detail` of each check)
    seconds: float = 0.0
    submitted_at: str = ""  # when it was submitted (nbgrader's timestamp.txt, else the file's time, UTC)
    format: int = RESULT_FORMAT

    def to_json(self) -> str:
        """The result file's text."""
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Record:
        """The record `to_json` wrote (ValueError, TypeError or KeyError when it is not one)."""
        data = json.loads(text)
        if data.get("format") != RESULT_FORMAT:
            raise ValueError(f"a result of format {data.get('format')}, not {RESULT_FORMAT}")
        data["result"] = NotebookResult.from_dict(data["result"])
        return cls(**data)

    def notes_of_kind(self, kinds: set[str]) -> list[str]:
        """The messages of the engine's notes of these kinds."""
        return [note.message for note in self.result.notes if note.kind in kinds]


def load_record(path: Path) -> Record | None:
    """The record in a result file; None when it is missing, unreadable or of another format."""
    try:
        return Record.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # unreadable or from another version: grade again


def empty_result(exercise: Exercise, notebook: str, error: str, cell_points: dict[str, float]) -> NotebookResult:
    """A NotebookResult scoring 0 on every part, for a submission that could not run."""
    result = NotebookResult(notebook=notebook, exercise=exercise.id, error=error)
    result.parts = {cell: PartScore(cell, 0.0, points) for cell, points in cell_points.items()}
    result.max_score = sum(cell_points.values())
    return result


def without_paths(result: NotebookResult, paths: set[str], name: str) -> NotebookResult:
    """`result` with every mention of the submission's `paths` (the instructor's folders) replaced by its
    file `name`, field by field: the result names the submission as its student knows it."""
    def hide(text: str) -> str:
        for path in sorted(paths, key=len, reverse=True):
            text = text.replace(path, name)
        return text

    result.notebook = name
    result.error = hide(result.error) if result.error else result.error
    for check in result.checks:
        check.message, check.detail = hide(check.message), hide(check.detail)
    for cell in result.cells:
        cell.error, cell.output = hide(cell.error), hide(cell.output)
    for note in result.notes:
        note.message = hide(note.message)
    return result


def write_csv(path: Path, records: Sequence[Record]) -> None:
    """One row per submission: totals, status and reasons, then one column per graded part."""
    part_columns = list(dict.fromkeys(cell for r in records for cell in r.part_max))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["student", "exercise", "score", "max_score", "status", "reason", "submitted",
                     *part_columns])
    for r in records:
        writer.writerow([r.student, r.exercise, f"{r.score:g}", f"{r.max_score:g}", r.status,
                         " | ".join(r.reasons), r.submitted_at,
                         *(f"{r.parts[c]:g}" if c in r.parts else "" for c in part_columns)])
    write_atomic(path, buffer.getvalue())
