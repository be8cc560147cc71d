"""Helpers for the release, autograde and validation tests: a private copy of the fixture course and
submissions derived from its solution notebook."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from bertcourse.course import Course, load_course

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "course"
EXERCISE = "fx01-add"
NOTEBOOK = "add.ipynb"


def make_course(folder: Path, check_time_limit_s: float | None = None) -> Course:
    """A copy of tests/fixtures/course with the course's real nbgrader config, in `folder`.

    `check_time_limit_s`: a shorter limit per cell and check than the fixture's 10 s, for a batch whose
    hanging submission need not cost 10 s each time it is graded."""
    shutil.copytree(FIXTURE, folder)
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", folder / "autograder" / "nbgrader_config.py")
    if check_time_limit_s is not None:
        manifest = folder / "course.yml"
        text = manifest.read_text()
        assert text.count("check_time_limit_s: 10\n") == 1, "the fixture's limit moved: update make_course"
        manifest.write_text(text.replace("check_time_limit_s: 10\n", f"check_time_limit_s: {check_time_limit_s:g}\n"))
    return load_course(folder)


def solution(course: Course) -> dict:
    return json.loads((course.root / "solutions" / EXERCISE / NOTEBOOK).read_text())


def with_cells(nb: dict, sources: dict[str, str]) -> dict:
    """A copy of the notebook with the cells of the given grade_ids replaced by new source."""
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in sources:
            cell["source"] = sources[grade_id]
    return nb


def renamed_grade_ids(nb: dict) -> dict:
    """A notebook whose graded cells carry other ids: what a notebook of another exercise looks like."""
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader")
        if meta:
            meta["grade_id"] = "other_" + meta["grade_id"]
    return nb


def submit(submitted: Path, student: str, content: dict | str | None, name: str = NOTEBOOK,
           exercise: str = EXERCISE) -> Path:
    folder = submitted / student / exercise
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
    return path


def tree_digest(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file, to prove a folder was not modified."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def hidden_source_lines(course: Course) -> list[str]:
    """Lines of the hidden checks that would give a check away if a student saw them."""
    text = (course.root / "autograder" / "checks" / "fx01_add.py").read_text()
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if len(line) > 15 and not line.startswith("#")]
