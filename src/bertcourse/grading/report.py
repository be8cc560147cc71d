"""`bertcourse grade NOTEBOOK`: grade one's own notebook and print each check, subtotals and the score.

The result is the engine's `NotebookResult` (the one result shape of every grading front end):
printed as a report, or with `--json` as its data, which `grade_this_notebook` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from bertcourse.course import Course, CourseError, find_root, load_course
from bertcourse.folders import is_artefact
from bertcourse.grading.exercises import infer_exercise
from bertcourse.grading.results import CheckResult, NotebookResult
from bertcourse.grading.submission import SubmissionError, read_notebook

NOT_WRITTEN = "your code raised NotImplementedError"  # how a check fails on nbgrader's stub (student.py)


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


# Words that say no more than "it failed": a reason made of these and the words of the check's own name ("a
# pass@k differs" under "Pass at k unbiased", or the judge's "the result is not what was expected") restates
# the label printed just above it.
EMPTY_WORDS = frozenset(
    "a an the of in on at to by for with and or as than it its this that these those is are was were be been not no "
    "any some does do did has have got gave give what which right wrong correct incorrect differ differs different "
    "mismatch expected result results value values return returned returns answer".split())


def _words(text: str) -> set[str]:
    """The lower-cased words of `text`, a plural `s` dropped (so that "cases" matches "case")."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in re.findall(r"[a-z0-9]+", text.lower())}


def why_line(check: CheckResult) -> str:
    """The reason printed under a failed check's hint: its message, unless that says nothing the check's name
    does not (then nothing is printed rather than the label again). A reason tells what the code did: the
    case it failed and what it returned, or the mistake recognised."""
    message = check.message
    if not message or not _words(message) - _words(check_label(check.name)) - EMPTY_WORDS:
        return ""
    return message


def shared_messages(messages: Iterable[str]) -> dict[str, int]:
    """{message: count} of the non-empty messages given more than once, in first-seen order: a blank
    submission fails a dozen checks for one reason, which is then said once."""
    counts = Counter(m for m in messages if m)
    return {m: n for m, n in counts.items() if n > 1}


def not_written(check: CheckResult) -> bool:
    """A check that failed only because the code it calls is still nbgrader's stub: its hint is about a
    mistake nobody made yet, so it is not shown."""
    return not check.passed and check.message.startswith(NOT_WRITTEN)


def unwritten_summary(checks: Sequence[CheckResult]) -> str:
    """One line for the checks of a part that its unwritten code failed ("" when none did)."""
    stubs = [c for c in checks if not_written(c)]
    if not stubs:
        return ""
    where = list(dict.fromkeys(c.message[len(NOT_WRITTEN):].split(":")[0].strip() for c in stubs))
    functions = ", ".join(w[3:] for w in where if w.startswith("in "))
    checks = f"{len(stubs)} check{'s' if len(stubs) > 1 else ''} ({_number(sum(c.max_points for c in stubs))} points)"
    return (f"not written yet: {functions or 'the code'} still raises NotImplementedError; "
            f"{checks} will grade it once it is written")


def format_result(result: NotebookResult, title: str = "") -> str:
    """The report `bertcourse grade` prints: each check, hints, notes, per-part subtotals, the score.

    A part whose code is not written yet gets one line instead of a failed check (and a hint) per check."""
    lines = [f"{result.exercise}{f': {title}' if title else ''}  ({result.notebook})"]
    if result.error:
        lines.append(f"NOT GRADED: {result.error}")
    written = [c for c in result.checks if result.error or not not_written(c)]
    shared = shared_messages(c.message for c in written if not c.passed)
    said: set[str] = set()
    for check in result.checks:
        if check not in written:
            if check.cell not in said:
                said.add(check.cell)
                part = [c for c in result.checks if c.cell == check.cell]
                lines.append(f"  TODO [{check.cell}] {unwritten_summary(part)}")
            continue
        mark = "PASS" if check.passed else "FAIL"
        lines.append(f"  {mark} {check.name} [{check.cell}] {_number(check.points)}/{_number(check.max_points)}")
        if not check.passed and not result.error:
            if check.feedback:
                lines.append(f"       hint: {check.feedback}")
            if why_line(check) and check.message not in shared:
                lines.append(f"       why:  {why_line(check)}")
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


def student_view(result: NotebookResult) -> dict:
    """The result as `--json` writes it: everything but pytest's reports (`detail`, instructors only)."""
    data = result.to_dict()
    for check in data["checks"]:
        check["detail"] = ""
    return data


def notebook_to_grade(path: Path) -> Path:
    """The notebook `path` names: the file, or the one notebook in a folder (SubmissionError otherwise)."""
    if path.is_dir():
        found = sorted(p for p in path.glob("*.ipynb") if p.is_file() and not is_artefact(p.name))
        if len(found) != 1:
            raise SubmissionError(f"{path} is a folder with {len(found)} notebooks "
                                  f"({', '.join(p.name for p in found) or 'none'}); name the .ipynb file to grade")
        return found[0]
    if not path.is_file():
        raise SubmissionError(f"{path}: no such file")
    return path


def course_of(notebook: Path) -> Course:
    """The course whose hidden checks grade `notebook`: $BERTCOURSE_ROOT, else the working directory's
    checkout, else the checkout the notebook sits in (run from anywhere on a notebook in the checkout)."""
    if os.environ.get("BERTCOURSE_ROOT"):
        return load_course(check_files=False)
    for start in (Path.cwd(), notebook.resolve().parent):
        try:
            return load_course(find_root(start), check_files=False)
        except CourseError:
            continue
    raise CourseError(f"no course.yml in {Path.cwd()}, in {notebook.resolve().parent} or any folder above them; "
                      "run from the course folder or set BERTCOURSE_ROOT")


def grade_command(args: argparse.Namespace) -> int:
    """`bertcourse grade NOTEBOOK [--exercise ID] [--json]` (arguments: cli.py): exit 2 when the grade is void."""
    from bertcourse.grading.engine import Grader  # the engine's processes: only once the input is known good

    path = notebook_to_grade(Path(args.notebook))
    course = course_of(path)
    read_notebook(path)  # a file that is not a notebook is reported before any process starts
    exercise = course.exercise(args.exercise or infer_exercise(path, course))
    with Grader(course) as grader:
        result = grader.grade(path, exercise)
    print(json.dumps(student_view(result), indent=1) if args.json else format_result(result, exercise.title))
    if result.error:  # not graded (a broken file, another exercise's notebook): say why and exit 2
        raise SubmissionError(result.error)
    return 0
