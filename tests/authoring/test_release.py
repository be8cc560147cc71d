"""`bertcourse release`: nbgrader's student version of each exercise, deterministic and committed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from batch_support import ROOT, hidden_source_lines, make_course

from bertcourse.authoring.release import release, stale_release
from bertcourse.course import load_course
from bertcourse.grading.batch.gradebook import grade_cell_points, open_gradebook
from bertcourse.grading.exercises import exercise_cells

pytestmark = pytest.mark.slow


@pytest.fixture
def course(tmp_path):
    return make_course(tmp_path / "course")


def test_release_is_blank_locked_deterministic_and_recorded(course):
    (folder,) = release(course)
    path = folder / "add.ipynb"
    first = path.read_bytes()
    nb = json.loads(first)
    text = first.decode()
    assert "return a + b" not in text and 'answer_q1 = "b"' not in text  # solutions replaced by stubs
    assert "raise NotImplementedError()" in text
    cells = {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"]}
    assert cells["add_checks"]["metadata"]["editable"] is False  # test cells are locked
    assert all(not c.get("outputs") for c in nb["cells"])
    assert not any(line in text for line in hidden_source_lines(course))
    assert sorted(p.name for p in folder.iterdir()) == ["add.ipynb"]  # nothing from autograder/ travels

    release(course)
    assert path.read_bytes() == first  # re-running gives identical files
    with open_gradebook(f"sqlite:///{course.root}/gradebook.db") as gradebook:
        assert grade_cell_points(gradebook, "fx01-add") == {"add": {"add_checks": 2.0, "q1_checks": 1.0}}
    assert exercise_cells(course, course.exercise("fx01-add")) == {"add_checks": 2.0, "q1_checks": 1.0}


def test_stale_release_is_detected(course):
    release(course)
    assert stale_release(course) == []
    released = course.root / "exercises" / "fx01-add" / "add.ipynb"

    nb = json.loads(released.read_text())
    nb["cells"][1]["source"] = "def add(a, b):\n    return a + b\n"  # someone committed a solution
    released.write_text(json.dumps(nb))
    problems = stale_release(course)
    assert any("exercises/fx01-add/add.ipynb differs" in p for p in problems)

    release(course)
    (course.root / "exercises" / "fx01-add" / "notes.txt").write_text("left over")
    assert any("notes.txt is not part of the release" in p for p in stale_release(course))

    release(course)
    source = course.root / "solutions" / "fx01-add" / "add.ipynb"
    source.write_text(source.read_text().replace("Write `add(a, b)`", "Write the function `add(a, b)`"))
    assert any("differs" in p for p in stale_release(course))


def test_release_command_rejects_unknown_exercise(course):
    env = {**os.environ, "BERTCOURSE_ROOT": str(course.root)}
    proc = subprocess.run([sys.executable, "-m", "bertcourse.cli", "release", "no-such-exercise"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "unknown exercise 'no-such-exercise'" in proc.stderr
    assert not (course.root / "exercises" / "fx01-add").exists()


def test_hidden_checks_are_outside_the_installed_package():
    import bertcourse

    package = Path(bertcourse.__file__).parent
    checks = {p.name for p in (ROOT / "autograder" / "checks").glob("*.py")}
    assert not {p.name for p in package.rglob("*.py")} & checks
    assert not list(package.rglob("autograder"))


REAL_COURSE = load_course(ROOT)


@pytest.mark.parametrize("exercise_id", [e.id for e in REAL_COURSE.exercises])
def test_committed_release_of_the_course_is_up_to_date(exercise_id):
    assert stale_release(REAL_COURSE, [exercise_id]) == []



def _leave_editor_artefacts(folder: Path, stale: str) -> None:
    """What JupyterLab, Python, macOS, LibreOffice and editors leave next to a notebook."""
    checkpoints = folder / ".ipynb_checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / "add-checkpoint.ipynb").write_text(stale)  # a stale copy of the notebook
    (folder / "__pycache__").mkdir(exist_ok=True)
    (folder / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\0")
    (folder / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (folder / "._add.ipynb").write_bytes(b"\0\5\26\7")
    (folder / "add.ipynb~").write_text(stale)
    (folder / ".~lock.add.ipynb#").write_text("someone,host,01.01.2026 10:00,")
    (folder / ".hidden" / "deeper").mkdir(parents=True, exist_ok=True)
    (folder / ".hidden" / "deeper" / "add.ipynb").write_text(stale)


def test_editor_artefacts_do_not_make_the_release_stale_nor_travel_into_it(course, monkeypatch, capsys):
    from bertcourse import cli

    release(course)
    released = course.root / "exercises" / "fx01-add"
    stale = (course.root / "solutions" / "fx01-add" / "add.ipynb").read_text()  # the solution: very stale
    _leave_editor_artefacts(released, stale)
    assert stale_release(course) == []

    _leave_editor_artefacts(course.root / "solutions" / "fx01-add", stale)
    assert stale_release(course) == []
    monkeypatch.setenv("BERTCOURSE_ROOT", str(course.root))
    assert cli.main(["release"]) == 0
    assert "released exercises/fx01-add/: add.ipynb\n" in capsys.readouterr().out
    assert sorted(p.name for p in released.iterdir()) == ["add.ipynb"]  # nothing of the editor's travels

    (released / "notes.txt").write_text("not an artefact")  # real content is still compared
    assert any("notes.txt is not part of the release" in p for p in stale_release(course))


def test_the_artefact_rule(tmp_path):
    from bertcourse.folders import content_files, is_artefact

    for name in (".ipynb_checkpoints", "__pycache__", ".DS_Store", "._add.ipynb", "add.ipynb~", ".~lock.a.csv#",
                 ".git", "Thumbs.db"):
        assert is_artefact(name), name
    for name in ("add.ipynb", "add-checkpoint.ipynb", "data.csv", "notes~draft.md", "_common.py"):
        assert not is_artefact(name), name
    _leave_editor_artefacts(tmp_path, "{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.ipynb").write_text("{}")
    (tmp_path / "a.ipynb").write_text("{}")
    (tmp_path / "a.txt").write_text("")
    assert content_files(tmp_path, "*.ipynb") == [tmp_path / "a.ipynb", tmp_path / "sub" / "b.ipynb"]
    assert content_files(tmp_path, "*.ipynb", recursive=False) == [tmp_path / "a.ipynb"]
    assert content_files(tmp_path) == [tmp_path / "a.ipynb", tmp_path / "a.txt", tmp_path / "sub" / "b.ipynb"]
