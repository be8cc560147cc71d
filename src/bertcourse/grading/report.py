"""`bertcourse grade NOTEBOOK`: grade one's own notebook and print each check, subtotals and the score."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from bertcourse.course import load_course
from bertcourse.grading.engine import Grader
from bertcourse.grading.exercises import infer_exercise
from bertcourse.grading.results import NotebookResult
from bertcourse.grading.submission import SubmissionError, read_notebook


def _number(value: float) -> str:
    return f"{value:g}"


def check_label(name: str) -> str:
    """What a check checks, for students: its function name made readable ("test_mask_share" ->
    "Mask share"). Authors name checks by what they check, never by the answer (autograder/README.md)."""
    for prefix in ("test_", "check_"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    text = " ".join(name.replace("_", " ").split())
    return text[:1].upper() + text[1:] if text else "check"


def shared_messages(messages: Iterable[str]) -> dict[str, int]:
    """{message: count} of the non-empty messages given more than once, in first-seen order: a blank
    submission fails a dozen checks for one reason, which is then said once."""
    counts = Counter(m for m in messages if m)
    return {m: n for m, n in counts.items() if n > 1}


def format_result(result: NotebookResult, title: str = "") -> str:
    """The report `bertcourse grade` prints: each check, hints, notes, per-part subtotals, the score."""
    lines = [f"{result.exercise}{f': {title}' if title else ''}  ({result.notebook})"]
    if result.error:
        lines.append(f"NOT GRADED: {result.error}")
    shared = shared_messages(c.message for c in result.checks if not c.passed)
    for check in result.checks:
        mark = "PASS" if check.passed else "FAIL"
        lines.append(f"  {mark} {check.name} [{check.cell}] {_number(check.points)}/{_number(check.max_points)}")
        if not check.passed and not result.error:
            if check.feedback:
                lines.append(f"       hint: {check.feedback}")
            if check.message and check.message not in shared:
                lines.append(f"       why:  {check.message}")
    if not result.error:
        lines.extend(f"{n} checks failed because: {message}" for message, n in shared.items())
    if result.notes:
        lines.append("notes:")
        lines.extend(f"  - {note.message}" for note in result.notes)
    if result.parts:
        lines.append("parts:")
        lines.extend(f"  {p.grade_id}: {_number(p.score)}/{_number(p.max_score)}" for p in result.parts.values())
    lines.append(f"score: {_number(result.score)}/{_number(result.max_score)}")
    return "\n".join(lines)


def grade_command(args: argparse.Namespace) -> int:
    """`bertcourse grade NOTEBOOK [--exercise ID]` (arguments: cli.py): exit 2 when the grade is void."""
    course = load_course(check_files=False)
    path = Path(args.notebook)
    if not path.is_file():
        raise SubmissionError(f"{path}: no such file")
    read_notebook(path)  # a file that is not a notebook is reported before any process starts
    exercise_id = args.exercise or infer_exercise(path, course)
    exercise = course.exercise(exercise_id)
    with Grader(course) as grader:
        result = grader.grade(path, exercise)
    print(format_result(result, exercise.title))
    if result.error:  # not graded (a broken file, another exercise's notebook): say why and exit 2
        raise SubmissionError(result.error)
    return 0
