"""What grading one notebook produces: per-check results, per-part subtotals, cell records, notes.

Plain dataclasses with `to_dict()` so a batch can write them as JSON and read them back
(`NotebookResult.from_dict`) when it resumes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CheckResult:
    """One hidden check. `message` is safe to show a student; `detail` (pytest's report) may reveal the
    check and is meant for instructors only."""

    name: str
    cell: str  # grade_id of the autograded test cell the check belongs to
    points: float  # points earned: max_points if passed, else 0
    max_points: float
    passed: bool
    feedback: str  # the check author's one-line hint, shown when the check fails
    message: str = ""  # why it failed, in the student's terms
    detail: str = ""


@dataclass
class CellRecord:
    """How one code cell of the submission ran in the worker."""

    index: int  # position among all cells of the submitted notebook
    grade_id: str | None
    status: str  # ok | error | timeout | crashed | memory | skipped
    error: str = ""
    output: str = ""  # the start of what the cell printed (capped)


@dataclass
class Note:
    """Something a grader or student should know: a cell that crashed, a missing cell, a fallback."""

    kind: str  # e.g. cell-error, cell-timeout, worker-crash, memory, missing-cell, duplicate-cell, ...
    message: str
    cell: str | None = None


@dataclass
class PartScore:
    """The subtotal of one graded part (the checks of one autograded test cell)."""

    grade_id: str
    score: float
    max_score: float


@dataclass
class NotebookResult:
    """Everything grading one notebook produced (see `engine` for the fields)."""

    notebook: str
    exercise: str
    score: float = 0.0
    max_score: float = 0.0
    checks: list[CheckResult] = field(default_factory=list)
    parts: dict[str, PartScore] = field(default_factory=dict)
    cells: list[CellRecord] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    error: str | None = None  # set when the grade is invalid as a whole (score is then 0)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when grading ran to the end (whatever the score)."""
        return self.error is None

    def failed_checks(self) -> list[str]:
        """The names of the checks that failed."""
        return [c.name for c in self.checks if not c.passed]

    def passed_checks(self) -> list[str]:
        """The names of the checks that passed."""
        return [c.name for c in self.checks if c.passed]

    def check(self, name: str) -> CheckResult:
        """The result of the check `name` (KeyError naming the checks there are)."""
        for result in self.checks:
            if result.name == name:
                return result
        raise KeyError(f"no check named {name!r}; checks: {', '.join(c.name for c in self.checks)}")

    def add_note(self, kind: str, message: str, cell: str | None = None) -> None:
        """Add a Note."""
        self.notes.append(Note(kind, message, cell))

    def total(self) -> None:
        """Recompute per-part subtotals and the total from the check results."""
        parts: dict[str, PartScore] = {}
        for result in self.checks:
            part = parts.setdefault(result.cell, PartScore(result.cell, 0.0, 0.0))
            part.score += result.points
            part.max_score += result.max_points
        self.parts = parts
        self.max_score = sum(p.max_score for p in parts.values())
        self.score = 0.0 if self.error else sum(p.score for p in parts.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NotebookResult:
        """The result `to_dict` gave."""
        data = dict(data)
        data["checks"] = [CheckResult(**c) for c in data.get("checks", [])]
        data["parts"] = {k: PartScore(**v) for k, v in data.get("parts", {}).items()}
        data["cells"] = [CellRecord(**c) for c in data.get("cells", [])]
        data["notes"] = [Note(**n) for n in data.get("notes", [])]
        return cls(**data)
