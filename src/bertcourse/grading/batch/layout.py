"""nbgrader's submissions layout, `submitted/<student>/<exercise>/<notebook>.ipynb`: what there is to grade.

Each `<student>/<exercise>/` folder becomes a `Job`: the notebook to grade, or the reason there is
none. A job's key hashes the submission with what its grade depends on besides it (the exercise's
checks, their shared helpers, its source notebook and course.yml entry), so that a re-run regrades a
submission exactly when its grade could change.
"""

from __future__ import annotations

import dataclasses
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

    @property
    def label(self) -> str:
        """`student/exercise`, how messages and the records' index name a job."""
        return f"{self.student}/{self.exercise_id}"


def _visible(path: Path) -> bool:
    """Not an editor's artefact: JupyterLab's checkpoint copies and backups are never graded."""
    return not is_artefact(path.name)


def find_submissions(course: Course, submissions: Path, exercise_ids: Sequence[str] | None = None) -> list[Job]:
    """Every `<student>/<exercise>/` folder, with the notebook to grade or the reason there is none."""
    if not submissions.is_dir():
        raise BatchError(f"{submissions} is not a folder (expected submitted/<student>/<exercise>/<name>.ipynb)")
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
    return jobs


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


def submission_timestamp(submissions: Path, student: str, exercise_id: str) -> str | None:
    """The submission time nbgrader's collect wrote next to it, when it is one nbgrader can read."""
    path = submissions / student / exercise_id / TIMESTAMP_NAME
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    from nbgrader.utils import parse_utc  # nbgrader loads slowly: only when there is a timestamp

    try:
        parse_utc(text)
    except Exception:  # nbgrader's own collect writes this file; anything else is ignored
        return None
    return text
