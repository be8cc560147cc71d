"""Autograding that a submission cannot fool: student code runs in a sandboxed worker process, the
hidden checks run in a separate judge process and see only data. See `engine` for the public API."""

from bertcourse.grading.engine import CheckInfo, Grader, GradingError, grade_notebook, infer_exercise
from bertcourse.grading.judge import NotData, Student, StudentError, StudentMissing, WorkerLost
from bertcourse.grading.protocol import Remote
from bertcourse.grading.results import CellRecord, CheckResult, Note, NotebookResult, PartScore

__all__ = [
    "CellRecord", "CheckInfo", "CheckResult", "Grader", "GradingError", "Note", "NotData", "NotebookResult",
    "PartScore", "Remote", "Student", "StudentError", "StudentMissing", "WorkerLost", "grade_notebook",
    "infer_exercise",
]
