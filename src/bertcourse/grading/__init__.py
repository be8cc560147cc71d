"""Autograding that a submission cannot fool: student code runs in a sandboxed worker process, the
hidden checks run in a separate judge process and see only data. See `engine` for the public API.

Names are imported lazily, so `import bertcourse.grading.<module>` (the worker, the release tools)
does not pull in pytest or the engine.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CheckInfo": "engine", "Grader": "engine", "GradingError": "engine", "grade_notebook": "engine",
    "infer_exercise": "engine",
    "NotData": "judge", "Student": "judge", "StudentError": "judge", "StudentMissing": "judge", "WorkerLost": "judge",
    "Remote": "protocol",
    "CellRecord": "results", "CheckResult": "results", "Note": "results", "NotebookResult": "results",
    "PartScore": "results",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertcourse.grading' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bertcourse.grading.{_EXPORTS[name]}"), name)
