"""Autograding that a submission cannot fool: student code runs in a sandboxed worker process, the
hidden checks run in a separate judge process and see only data. This folder is the engine (see
`engine` for its public API and the map of its modules) and `bertcourse grade` (report.py); the batch
front end, `bertcourse autograde`, lives in `batch/`. The authoring tools (release, validate, the
proofs of the hidden checks) live apart, in `bertcourse.authoring`, and use this package, never the
reverse.

Names are imported lazily, so `import bertcourse.grading.<module>` (the zygote, the worker) does not
pull in pytest or the engine.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Grader": "engine", "grade_notebook": "engine",
    "CheckInfo": "exercises", "GradingError": "exercises", "infer_exercise": "exercises",
    "Diagnosis": "student", "NotData": "student", "Student": "student", "StudentError": "student",
    "StudentMissing": "student", "WorkerLost": "student",
    "Remote": "protocol",
    "CellRecord": "results", "CheckResult": "results", "Note": "results", "NotebookResult": "results",
    "PartScore": "results",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertcourse.grading' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bertcourse.grading.{_EXPORTS[name]}"), name)
