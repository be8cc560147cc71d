"""`bertcourse release`: the student notebooks in `exercises/`, generated from `solutions/` by nbgrader.

nbgrader's `generate_assignment` does the real work (solutions replaced by stubs, test cells locked,
checksums, grade cells saved in the gradebook). This module adds what a committed release needs: the
notebooks are written in one normalised form without outputs or machine-specific metadata, so that
re-running the release gives identical files and a test can tell when the committed release is stale.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat

from bertcourse.course import Course, Exercise, load_course
from bertcourse.folders import content_files, is_artefact
from bertcourse.grading.batch.gradebook import default_db_url, generate_assignment
from bertcourse.grading.exercises import RELEASE_DIR

# Metadata Jupyter or Colab add when a notebook is opened or run; none of it belongs in a release.
_VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled", "colab", "outputId")
_VOLATILE_NOTEBOOK_METADATA = ("widgets", "toc", "varInspector", "vscode")


def select_exercises(course: Course, exercise_ids: Sequence[str] | None) -> list[Exercise]:
    """The named exercises (all of course.yml's when none are named); unknown ids are an error."""
    if not exercise_ids:
        return list(course.exercises)
    return [course.exercise(exercise_id) for exercise_id in exercise_ids]


def normalise_notebook(nb: Any) -> Any:
    """The notebook without outputs, execution counts or volatile metadata (in place, returned)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in _VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if "attachments" in cell and not cell.attachments:
            del cell["attachments"]
    for key in _VOLATILE_NOTEBOOK_METADATA:
        nb.metadata.pop(key, None)
    if "language_info" in nb.metadata:  # keeps the language, drops the version of the machine it ran on
        nb.metadata.language_info = {"name": nb.metadata.language_info.get("name", "python")}
    return nb


def _write_normalised(path: Path) -> None:
    nb = normalise_notebook(nbformat.read(path, as_version=4))
    text = nbformat.writes(nb) + "\n"
    path.write_text(text, encoding="utf-8")


def generate(course: Course, exercise: Exercise, release_root: Path, db_url: str) -> Path:
    """nbgrader's release of one exercise into `release_root/<id>/`, normalised; returns that folder.

    The gradebook at `db_url` gets (or updates) the assignment and its grade cells.
    """
    out = generate_assignment(course, exercise, release_root, db_url)
    for notebook in content_files(out, "*.ipynb"):
        _write_normalised(notebook)
    return out


def release(course: Course, exercise_ids: Sequence[str] | None = None, db_url: str | None = None) -> list[Path]:
    """Regenerate `exercises/<id>/` for the selected exercises; returns the folders written."""
    db_url = db_url or default_db_url(course)
    written = []
    for exercise in select_exercises(course, exercise_ids):
        with tempfile.TemporaryDirectory(prefix="bertcourse-release-") as tmp:
            fresh = generate(course, exercise, Path(tmp), db_url)
            target = course.path(f"{RELEASE_DIR}/{exercise.id}")
            if target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(fresh, target, ignore=_artefacts)
        written.append(target)
    return written


def _artefacts(folder: str, names: list[str]) -> list[str]:
    """shutil.copytree's `ignore`: an editor's files in solutions/ never reach the release."""
    return [name for name in names if is_artefact(name)]


def _tree(folder: Path) -> dict[str, Path]:
    """{relative path: file} of a release, without editor artefacts (JupyterLab's checkpoints, backups)."""
    return {p.relative_to(folder).as_posix(): p for p in content_files(folder)}


def _comparable(path: Path) -> object:
    if path.suffix == ".ipynb":
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return f"unreadable notebook: {exc}"
    return path.read_bytes()


def stale_release(course: Course, exercise_ids: Sequence[str] | None = None) -> list[str]:
    """How the committed release differs from a fresh one (empty when it is up to date).

    The fresh release is generated in a temporary folder with a throwaway gradebook, so checking
    touches neither `exercises/` nor the course's gradebook.
    """
    problems = []
    with tempfile.TemporaryDirectory(prefix="bertcourse-release-check-") as tmp:
        db_url = f"sqlite:///{tmp}/gradebook.db"
        for exercise in select_exercises(course, exercise_ids):
            fresh = _tree(generate(course, exercise, Path(tmp) / "release", db_url))
            committed_dir = course.path(f"{RELEASE_DIR}/{exercise.id}")
            committed = _tree(committed_dir) if committed_dir.is_dir() else {}
            where = f"{RELEASE_DIR}/{exercise.id}"
            for name in sorted(fresh.keys() - committed.keys()):
                problems.append(f"{where}/{name} is missing")
            for name in sorted(committed.keys() - fresh.keys()):
                problems.append(f"{where}/{name} is not part of the release any more")
            for name in sorted(fresh.keys() & committed.keys()):
                if _comparable(fresh[name]) != _comparable(committed[name]):
                    problems.append(f"{where}/{name} differs from solutions/{exercise.id}/{name}'s release")
    if problems:
        problems.append("run `bertcourse release` and commit exercises/")
    return problems


def release_command(args: Any) -> int:
    """`bertcourse release [EXERCISE...]` (arguments: cli.py)."""
    course = load_course()
    for folder in release(course, args.exercises, db_url=args.db_url):
        notebooks = [p.name for p in content_files(folder, "*.ipynb")]
        print(f"released {folder.relative_to(course.root)}/: {', '.join(notebooks)}")
    return 0
