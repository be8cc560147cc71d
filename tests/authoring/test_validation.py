"""`bertcourse validate`: a valid course passes every row; each kind of fault fails its own row."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from batch_support import make_course, with_cells

from bertcourse import cli
from bertcourse.authoring import validation
from bertcourse.authoring.release import release
from bertcourse.authoring.validation import validate_course
from bertcourse.course import load_course
from bertcourse.grading.engine import Grader

pytestmark = pytest.mark.slow


def _rows(rows):
    return {(row.item, row.claim): row for row in rows}


class GradedOnce:
    """Stands in for `validate_course`'s Grader: one Grader of the test's course, each notebook graded once and
    read back when the command validates the same bytes again (grading is deterministic, see
    tests/support/notebook_gradings.py)."""

    def __init__(self, grader: Grader):
        self.grader, self.results = grader, {}

    def __call__(self, course) -> GradedOnce:
        assert course.root == self.grader.course.root
        return self

    def __enter__(self) -> GradedOnce:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass  # the test closes the Grader

    def checks(self, exercise):
        return self.grader.checks(exercise)

    def grade(self, notebook, exercise):
        key = (hashlib.sha256(Path(notebook).read_bytes()).hexdigest(), repr(self.grader.exercise(exercise)))
        if key not in self.results:
            self.results[key] = self.grader.grade(notebook, exercise)
        return self.results[key]


def test_valid_course_passes_and_the_command_exits_0(tmp_path, monkeypatch, capsys):
    course = make_course(tmp_path / "course")
    release(course)
    monkeypatch.delenv("BERTCOURSE_PROFILE", raising=False)  # the lesson asserts it runs with cpu-quick
    monkeypatch.setenv("BERTCOURSE_ROOT", str(course.root))
    assert cli.main(["validate"]) == 0
    out = capsys.readouterr().out
    passed = [line for line in out.splitlines() if line.startswith("PASS")]
    for claim in ("points add up", "solution scores full marks", "release scores zero", "release up to date",
                  "lesson executes"):
        assert any(claim in line for line in passed), out
    assert "5 passed, 0 failed" in out


def test_each_fault_fails_its_row(tmp_path, monkeypatch, capsys):
    course = make_course(tmp_path / "course")
    release(course)
    root = course.root
    # course.yml promises more points than the notebook's cells hold
    (root / "course.yml").write_text((root / "course.yml").read_text().replace("points: 3", "points: 4"))
    # the solution is wrong
    source = root / "solutions" / "fx01-add" / "add.ipynb"
    source.write_text(source.read_text().replace("return a + b", "return a * b"))
    # the committed release gives the answer away (so it is also out of date)
    released = root / "exercises" / "fx01-add" / "add.ipynb"
    released.write_text(json.dumps(with_cells(json.loads(released.read_text()), {"q1": 'answer_q1 = "b"\n'})))
    # the lesson fails
    lesson = root / "lessons" / "hello.ipynb"
    lesson.write_text(lesson.read_text().replace("assert profile == 'cpu-quick', profile", "1 / 0"))
    course = load_course(root)
    grader = Grader(course)
    graded = GradedOnce(grader)
    monkeypatch.setattr(validation, "Grader", graded)  # the command below reads back these gradings
    try:
        validated = validate_course(course)
        rows = _rows(validated)
        assert not rows[("fx01-add", "points add up")].ok
        assert "course.yml says 4" in rows[("fx01-add", "points add up")].detail
        assert not rows[("fx01-add", "solution scores full marks")].ok
        assert "test_add_small_integers" in rows[("fx01-add", "solution scores full marks")].detail
        assert not rows[("fx01-add", "release scores zero")].ok
        assert "test_answer_q1" in rows[("fx01-add", "release scores zero")].detail
        assert not rows[("fx01-add", "release up to date")].ok
        assert not rows[("hello", "lesson executes")].ok
        assert "ZeroDivisionError" in rows[("hello", "lesson executes")].detail

        monkeypatch.setenv("BERTCOURSE_ROOT", str(root))
        assert cli.main(["validate", "--skip-lessons", "--only", "fx01-add"]) == 1
        out = capsys.readouterr().out
        assert "FAIL  fx01-add" in out and "hello" not in out
        assert cli.main(["validate", "--only", "nope"]) == 2
        assert "unknown exercise or lesson 'nope'" in capsys.readouterr().err
    finally:
        grader.close()
    assert len(graded.results) == 2  # the solution and the release, each graded once


def test_the_course_exercises_are_valid(monkeypatch):
    """The real exercises: solutions score full marks, releases score zero, points add up, release current.
    The gradings are the test session's (tests/support/notebook_gradings.py): a notebook the proofs in
    tests/checks graded already (each solution, each release) is read back, not graded again."""
    from batch_support import ROOT
    from notebook_gradings import SharedGrading

    from bertcourse.authoring import validation

    monkeypatch.setattr(validation, "Grader", SharedGrading)
    course = load_course(ROOT)
    if not course.exercises:
        pytest.skip("course.yml lists no exercises yet")
    rows = validate_course(course, only=[e.id for e in course.exercises], skip_lessons=True)
    failed = [f"{row.item}: {row.claim}: {row.detail}" for row in rows if not row.ok]
    assert not failed, "\n".join(failed)
    assert len(rows) == 4 * len(course.exercises)


def test_a_release_opened_in_jupyterlab_is_still_up_to_date(tmp_path):
    """Opening the release in JupyterLab leaves `.ipynb_checkpoints/` (with a stale copy) behind."""
    from bertcourse.authoring.validation import release_current_row

    course = make_course(tmp_path / "course")
    release(course)
    released = course.root / "exercises" / "fx01-add"
    (released / ".ipynb_checkpoints").mkdir()
    solution = (course.root / "solutions" / "fx01-add" / "add.ipynb").read_text()
    (released / ".ipynb_checkpoints" / "add-checkpoint.ipynb").write_text(solution)
    (released / ".DS_Store").write_bytes(b"\0")
    (released / "add.ipynb~").write_text(solution)
    row = release_current_row(course, course.exercise("fx01-add"))
    assert row.ok, row.detail
    assert row.detail == "exercises/ matches"
