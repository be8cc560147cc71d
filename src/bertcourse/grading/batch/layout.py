"""nbgrader's submissions layout, `submitted/<student>/<exercise>/<notebook>.ipynb`: what there is to grade.

Each `<student>/<exercise>/` folder becomes a `Job`: the notebook to grade, or the reason there is
none. A job's key hashes the submission with what its grade depends on besides it (the exercise's
checks, their shared helpers, its source notebook and course.yml entry), so that a re-run regrades a
submission exactly when its grade could change.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertcourse.course import Course, Exercise
from bertcourse.errors import BertcourseError
from bertcourse.folders import is_artefact
from bertcourse.grading.batch.records import RESULT_FORMAT
from bertcourse.grading.exercises import SOURCE_DIR, check_files

TIMESTAMP_NAME = "timestamp.txt"  # nbgrader's collect writes the submission time there


class BatchError(BertcourseError):
    """The command was given something it cannot work with (no such folder, unknown exercise)."""


@dataclass
class Job:
    """One folder `<student>/<exercise>/` of the submissions directory."""

    student: str
    exercise_id: str
    folder: Path
    notebook: Path | None = None  # the notebook to grade; None when there is nothing gradable
    notebook_name: str = ""  # the notebook's name in the exercise (the gradebook's notebook id)
    problem: str = ""  # why the submission cannot be graded at all (then notebook is None)
    notes: list[str] = field(default_factory=list)  # things worth knowing, e.g. a renamed notebook
    key: str = ""
    submitted_at: str = ""  # when it was submitted: nbgrader's timestamp.txt, else the notebook's file time (UTC)

    @property
    def label(self) -> str:
        """`student/exercise`, how messages and the records' index name a job."""
        return f"{self.student}/{self.exercise_id}"


def _visible(path: Path) -> bool:
    """Not an editor's artefact: JupyterLab's checkpoint copies and backups are never graded."""
    return not is_artefact(path.name)


LAYOUT = "SUBMISSIONS/<student>/<exercise id>/<notebook>.ipynb"


def find_submissions(course: Course, submissions: Path, exercise_ids: Sequence[str] | None = None) -> list[Job]:
    """Every `<student>/<exercise>/` folder, with the notebook to grade or the reason there is none.

    A folder with nothing in that layout is refused (BatchError), naming what it holds instead: an empty
    class, notebooks right in a student's folder, or an exercise folder (a release) given by mistake."""
    if not submissions.is_dir():
        raise BatchError(f"{submissions} is not a folder (expected {LAYOUT})")
    for exercise_id in exercise_ids or []:
        course.exercise(exercise_id)  # an unknown id is the user's typo: say so before grading anything
    known = {e.id: e for e in course.exercises}
    jobs = []
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and _visible(p)):
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir() and _visible(p)):
            if exercise_ids and folder.name not in exercise_ids:
                continue
            job = Job(student_dir.name, folder.name, folder)
            jobs.append(job)
            exercise = known.get(folder.name)
            if exercise is None:
                job.problem = (f"'{folder.name}' is not an exercise of this course "
                               f"(course.yml defines: {', '.join(known) or 'none'})")
                continue
            expected = Path(exercise.notebook).name
            job.notebook_name = Path(expected).stem
            found = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and _visible(p))
            if folder / expected in found:
                job.notebook = folder / expected
            elif len(found) == 1:
                job.notebook = found[0]
                job.notes.append(f"the notebook is named {found[0].name}, not {expected}; it was graded as {expected}")
            elif found:
                job.problem = (f"no {expected} in {folder.name}/, and several other notebooks "
                               f"({', '.join(p.name for p in found)}): cannot tell which one to grade")
            else:
                job.problem = f"no notebook submitted (expected {folder.name}/{expected})"
            job.submitted_at = submission_timestamp(folder, job.notebook)
    if not any(job.exercise_id in known for job in jobs):
        raise BatchError(_no_class(submissions, known, exercise_ids))
    return jobs


def misplaced(submissions: Path, known: Iterable[str]) -> list[str]:
    """What looks like a submission in the wrong place: a notebook right in `<student>/` (it belongs in
    `<student>/<exercise id>/`), an exercise folder at the top (a release or source folder given instead)."""
    known = set(known)
    found = []
    for folder in sorted(p for p in submissions.iterdir() if p.is_dir() and _visible(p)):
        notebooks = sorted(p.name for p in folder.glob("*.ipynb") if p.is_file() and _visible(p))
        if folder.name in known:
            found.append(f"{folder.name}/ is an exercise folder, not a student's"
                         + (f" (it holds {', '.join(notebooks)})" if notebooks else ""))
        elif notebooks:
            more = f" (and {len(notebooks) - 1} more)" if len(notebooks) > 1 else ""
            found.append(f"{folder.name}/{notebooks[0]}{more} lies right in the student's folder; "
                         f"it belongs in {folder.name}/<exercise id>/")
    loose = sorted(p.name for p in submissions.glob("*.ipynb") if p.is_file() and _visible(p))
    if loose:
        found.append(f"{', '.join(loose)}: notebooks right in the submissions folder, with no student")
    return found


def _no_class(submissions: Path, known: dict[str, Exercise], exercise_ids: Sequence[str] | None) -> str:
    """Why `submissions` holds no submission to grade: the layout expected, and what is there instead."""
    wanted = ", ".join(exercise_ids) if exercise_ids else ", ".join(known) or "none"
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in submissions.iterdir() if _visible(p))
    there = (f"it holds {len(entries)} entries: {', '.join(entries[:8])}{', ...' if len(entries) > 8 else ''}"
             if entries else "it is empty")
    lines = [f"{submissions} holds no submission to grade: expected {LAYOUT} (nbgrader's submitted/ layout; "
             f"exercise ids: {wanted}); {there}"]
    lines += [f"  {problem}" for problem in misplaced(submissions, known)]
    return "\n".join(lines)


def _hash_files(digest: Any, paths: Iterable[Path]) -> None:
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")


def exercise_fingerprint(course: Course, exercise: Exercise) -> str:
    """What the grade of a submission depends on besides the submission: the checks (with the helpers
    they share), the source notebook and the course.yml entry."""
    digest = hashlib.sha256(f"bertcourse-result-v{RESULT_FORMAT}".encode())
    digest.update(json.dumps(dataclasses.asdict(exercise), sort_keys=True).encode())
    _hash_files(digest, [*check_files(course, exercise), course.path(f"{SOURCE_DIR}/{exercise.notebook}")])
    return digest.hexdigest()


def submission_key(job: Job, fingerprint: str) -> str:
    """The key a finished result is stored under: the exercise's fingerprint, the notebook, the problem."""
    digest = hashlib.sha256(fingerprint.encode())
    _hash_files(digest, [job.notebook] if job.notebook else [])
    digest.update(job.problem.encode())
    return digest.hexdigest()


def submission_timestamp(folder: Path, notebook: Path | None) -> str:
    """When a submission was made: nbgrader's collect writes it in `timestamp.txt` next to the notebook;
    without one (or with one nbgrader cannot read), the notebook's modification time, in UTC."""
    try:
        text = (folder / TIMESTAMP_NAME).read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    if text:
        import dateutil.parser  # what nbgrader reads it with (nbgrader itself loads slowly; lanes fork later)

        try:
            dateutil.parser.parse(" ".join(text.split(" ")[:2]))  # "<date> <time> <zone>", nbgrader's format
            return text
        except (ValueError, OverflowError):  # nbgrader's own collect writes this file; anything else is ignored
            pass
    if notebook is None:
        return ""
    return datetime.datetime.fromtimestamp(notebook.stat().st_mtime, datetime.UTC).isoformat()
