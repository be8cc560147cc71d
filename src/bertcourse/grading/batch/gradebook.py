"""nbgrader's configuration and gradebook, as the course uses them.

The course's nbgrader settings live once, in `autograder/nbgrader_config.py`; every command loads that
file here. Grades go into nbgrader's own gradebook (`nbgrader.api.Gradebook`) so that an instructor can
keep using nbgrader's tools (formgrader, `nbgrader export`) on grades the bertcourse autograder gave.
Only one process writes to it (the parent of a batch), because SQLite does not like several writers.

nbgrader, alembic and SQLAlchemy load slowly: they are imported inside the functions that use them,
so that a batch forks its grading lanes before loading them (and `bertcourse grade` never does).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from traitlets.config import Config

from bertcourse.course import Course, Exercise
from bertcourse.errors import BertcourseError
from bertcourse.grading.exercises import SOURCE_DIR, exercise_cells

CONFIG_PATH = "autograder/nbgrader_config.py"


class GradebookError(BertcourseError):
    """The nbgrader configuration or gradebook cannot be used."""


def load_nbgrader_config(course: Course, **course_directory: Any) -> Config:
    """The course's nbgrader Config, with `CourseDirectory` settings overridden by keyword."""
    from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

    path = course.path(CONFIG_PATH)
    try:
        config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    except ConfigFileNotFound as exc:
        raise GradebookError(f"{path} does not exist; the course's nbgrader settings belong there") from exc
    config.CourseDirectory.root = str(course.root)
    for key, value in course_directory.items():
        setattr(config.CourseDirectory, key, value)
    return config


def default_db_url(course: Course) -> str:
    """The gradebook URL of the course's nbgrader configuration ($BERTCOURSE_DB_URL, else SQLite)."""
    return str(load_nbgrader_config(course).CourseDirectory.db_url)


def class_db_url(course: Course, out: Path) -> str:
    """The gradebook of the class whose results go to `out`: the one nbgrader's configuration names when
    it names one ($BERTCOURSE_DB_URL or an edited config), else `out/gradebook.db`, so that each class (each
    submissions folder) keeps its own and a practice run never lands in the course's gradebook."""
    configured = default_db_url(course)
    if configured == "sqlite:///" + str(course.root / "gradebook.db"):  # the config's default: not a choice
        return "sqlite:///" + str(Path(out).resolve() / "gradebook.db")
    return configured


def url_password(db_url: str) -> str | None:
    """The password a database URL carries, if any."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(db_url).password or None
    except Exception:  # not a URL SQLAlchemy can parse: look for user:password@ by hand
        match = re.search(r"//[^/@:]*:([^@/]+)@", db_url)
        return match.group(1) if match else None


def redact(text: str, db_url: str) -> str:
    """`text` with the password of `db_url` replaced by *** (for every log, message and report)."""
    password = url_password(db_url)
    if not password:
        return text
    from urllib.parse import quote

    for form in sorted({password, quote(password, safe=""), quote(password)}, key=len, reverse=True):
        text = text.replace(f":{form}@", ":***@")
        if len(form) >= 4:  # a bare occurrence (an error message quoting it); shorter ones would mangle text
            text = text.replace(form, "***")
    return text


@functools.lru_cache(maxsize=1)
def _alembic_head() -> str:
    import nbgrader
    from alembic.script import ScriptDirectory

    return ScriptDirectory(os.path.join(os.path.dirname(nbgrader.__file__), "alembic")).get_current_head()


@contextlib.contextmanager
def alembic_on_path() -> Iterator[None]:
    """Let nbgrader create new gradebooks quickly and from a venv that is not activated.

    nbgrader stamps a new gradebook with its schema version by running the `alembic` executable found
    on PATH (only next to this Python in a venv that is not activated); that subprocess re-imports
    nbgrader and costs ~10 s on 2 cores. The same version is read here in-process, once.
    """
    import nbgrader.api

    old_path, old_version = os.environ.get("PATH", ""), nbgrader.api.get_alembic_version
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + old_path
    nbgrader.api.get_alembic_version = _alembic_head
    try:
        yield
    finally:
        os.environ["PATH"] = old_path
        nbgrader.api.get_alembic_version = old_version


@contextlib.contextmanager
def open_gradebook(db_url: str, course_id: str = "bertcourse") -> Iterator[Any]:
    """nbgrader's Gradebook at `db_url` (any SQLAlchemy URL), created if it does not exist yet."""
    from nbgrader.api import Gradebook

    if db_url.startswith("sqlite:///"):
        Path(db_url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    with alembic_on_path():
        try:
            gradebook = Gradebook(db_url, course_id)
        except Exception as exc:  # SQLAlchemy raises many kinds; say which database failed
            message = f"cannot open the gradebook {db_url}: {type(exc).__name__}: {exc}"
            raise GradebookError(redact(message, db_url)) from None  # the cause may repeat the URL
    try:
        yield gradebook
    finally:
        gradebook.close()


def grade_cell_points(gradebook: Any, exercise_id: str) -> dict[str, dict[str, float]]:
    """{notebook name: {grade cell id: max points}} as nbgrader recorded them at release."""
    from nbgrader.api import MissingEntry

    try:
        assignment = gradebook.find_assignment(exercise_id)
    except MissingEntry:
        return {}
    return {nb.name: {cell.name: float(cell.max_score) for cell in nb.grade_cells} for nb in assignment.notebooks}


def record_grades(
    gradebook: Any,
    exercise_id: str,
    notebook: str,
    student: str,
    cell_scores: dict[str, float],
    flagged: bool = False,
    timestamp: str | None = None,
) -> None:
    """Write one submission's automatic scores into the gradebook; re-recording overwrites.

    `cell_scores` maps each autograded cell's grade_id to its score; cells of the notebook missing from
    it score 0. A submission with something to look at (a crash, a timeout, a void grade) is `flagged`
    for the formgrader.
    """
    gradebook.update_or_create_student(student)
    kwargs = {"timestamp": timestamp} if timestamp else {}
    with warnings.catch_warnings():  # nbgrader's add_submission trips SQLAlchemy's autoflush warning
        warnings.simplefilter("ignore")
        submission = gradebook.update_or_create_submission(exercise_id, student, **kwargs)
    for submitted in submission.notebooks:
        if submitted.name != notebook:
            continue
        submitted.flagged = flagged
        for grade in submitted.grades:
            grade.auto_score = float(cell_scores.get(grade.name, 0.0))
            grade.needs_manual_grade = False
    gradebook.db.commit()


def generate_assignment(course: Course, exercise: Exercise, release_root: Path, db_url: str) -> Path:
    """Run nbgrader's generate_assignment for one exercise into `release_root/<id>/`; returns that folder.

    The gradebook at `db_url` gets (or updates) the assignment and its grade cells.
    """
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory

    source = course.path(f"{SOURCE_DIR}/{exercise.id}")
    if not source.is_dir():
        raise GradebookError(f"exercise {exercise.id!r}: source folder {source} does not exist")
    config = load_nbgrader_config(course, release_directory=str(release_root), db_url=db_url)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = exercise.id
    converter = GenerateAssignment(coursedir=coursedir, config=config)
    converter.force = True
    converter.log.setLevel("ERROR")
    with alembic_on_path():
        try:
            converter.start()
        except Exception as exc:  # nbgrader logs the reason, then raises a generic exception
            raise GradebookError(
                f"nbgrader could not generate the release of {exercise.id!r} from {source}: {exc}"
            ) from exc
    return release_root / exercise.id


def register_exercises(course: Course, exercises: Sequence[Exercise], db_url: str) -> None:
    """Make sure the gradebook knows each exercise and its grade cells as the source has them.

    `bertcourse release` does this already; a gradebook created elsewhere (`--db-url`) or a source
    changed since the release is brought up to date the same way, by nbgrader into a scratch folder.
    """
    with open_gradebook(db_url) as gradebook:
        stale = [e for e in exercises
                 if grade_cell_points(gradebook, e.id) != {Path(e.notebook).stem: exercise_cells(course, e)}]
    for exercise in stale:
        with tempfile.TemporaryDirectory(prefix="bertcourse-register-") as tmp:
            generate_assignment(course, exercise, Path(tmp), db_url)
