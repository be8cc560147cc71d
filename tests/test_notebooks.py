"""Every notebook of the course: committed without outputs, opens in Colab, installs itself there,
and is known to course.yml; the README's table of contents is generated from course.yml."""

import json
from pathlib import Path

import pytest

from bertcourse.course import load_course
from bertcourse.notebook import colab_badge, contents_table

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(
    p.relative_to(ROOT).as_posix()
    for folder in ("lessons", "exercises", "solutions")
    for p in (ROOT / folder).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
)


def _cells(path: str) -> list[dict]:
    return json.loads((ROOT / path).read_text())["cells"]


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_committed_without_outputs(path):
    for index, cell in enumerate(_cells(path)):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path} cell {index} has outputs: strip them before committing"
            assert cell.get("execution_count") is None, f"{path} cell {index} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_first_cell_opens_this_notebook_in_colab_and_the_next_installs_the_course(path):
    cells = _cells(path)
    # A solution notebook is the nbgrader source of its release: its badge opens the student's copy.
    opens = "exercises/" + path.removeprefix("solutions/") if path.startswith("solutions/") else path
    assert cells[0]["cell_type"] == "markdown"
    assert colab_badge(opens) in "".join(cells[0]["source"]), f"{path}: the first cell needs a badge to {opens}"
    first_code = next(c for c in cells if c["cell_type"] == "code")
    assert "google.colab" in "".join(first_code["source"]), f"{path}: the first code cell must install in Colab"


def test_every_lesson_notebook_is_in_the_manifest():
    course = load_course(ROOT)
    listed = {lesson.notebook for lesson in course.lessons}
    on_disk = {p for p in NOTEBOOKS if p.startswith("lessons/")}
    assert on_disk == listed, f"not in course.yml: {sorted(on_disk - listed)}; missing: {sorted(listed - on_disk)}"
    released = {f"exercises/{e.notebook}" for e in course.exercises}
    assert released <= set(NOTEBOOKS), f"run `bertcourse release`: missing {sorted(released - set(NOTEBOOKS))}"


def test_readme_contents_table_matches_the_manifest():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- course-contents")
    start = readme.index("\n", start) + 1
    end = readme.index("<!-- /course-contents -->")
    assert readme[start:end].strip() == contents_table(), (
        "README.md's table is out of date: run `make readme`"
    )
