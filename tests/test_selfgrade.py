"""Grading from inside the notebook: the last cell finds its notebook (JupyterLab session, Colab, a named
file), grades it in another process exactly like `bertcourse grade`, and does nothing while autograded."""

from __future__ import annotations

import http.server
import json
import shutil
import sys
import threading
import types
from pathlib import Path

import nbformat
import pytest

from bertcourse import cli, selfgrade
from bertcourse.course import load_course
from bertcourse.selfgrade import SelfGrade, find_course_root, grade_this_notebook, locate_notebook

ROOT = Path(__file__).resolve().parents[1]
COURSE = load_course(ROOT)
EXERCISES = [exercise.id for exercise in COURSE.exercises]
EX01 = COURSE.exercise("ex01-masking")
# What the tests that really grade exercise is the plumbing (find the notebook, run `bertcourse grade`, format
# its result), the same for every exercise: they grade the exercise quickest to grade, the quiz of ex07.
QUICK = COURSE.exercise("ex07-self-test")


@pytest.fixture
def no_jupyter(tmp_path, monkeypatch):
    """No Jupyter server, no session variable, not Colab, not autograded: a plain process."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    for name in ("JPY_SESSION_NAME", "NBGRADER_EXECUTION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


GRADING_CELL = ("# Grade this notebook (as saved) with the hidden checks: the report of `bertcourse grade`, shown "
                "here.\nfrom bertcourse.selfgrade import grade_this_notebook\n\ngrade_this_notebook(\"{}\")")


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_every_exercise_ends_with_a_locked_cell_that_grades_it(folder, exercise_id):
    """The same cell in every notebook but for the exercise's id, so what one exercise's grading shows about
    it (below) holds for all."""
    notebook = nbformat.read(ROOT / folder / COURSE.exercise(exercise_id).notebook, as_version=4)
    last = notebook.cells[-1]
    assert last.cell_type == "code"
    assert last.source == GRADING_CELL.format(exercise_id), last.source
    assert last.metadata["nbgrader"]["locked"] and not last.metadata["nbgrader"]["grade"]
    assert last.metadata["nbgrader"]["grade_id"] == "self_grade"


def test_does_nothing_while_the_notebook_is_autograded(no_jupyter, monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")

    def no_process(*args, **kwargs):
        raise AssertionError("grade_this_notebook started a process while autograded")

    monkeypatch.setattr(selfgrade.subprocess, "run", no_process)
    assert grade_this_notebook("ex01-masking") is None
    assert capsys.readouterr() == ("", "")


@pytest.mark.slow
def test_solution_with_the_grading_cell_still_scores_full_marks_without_recursion():
    """One exercise stands for all: the cell is the same in every notebook (the test above), and
    `grade_this_notebook` returns before anything that depends on the exercise while the notebook is graded
    (its first statement reads NBGRADER_EXECUTION, set by the worker). That every solution, this cell
    included, scores full marks is validate's row, asserted for every exercise by
    tests/authoring/test_validation.py::test_the_course_exercises_are_valid."""
    from notebook_gradings import graded_notebook

    exercise = QUICK
    result = graded_notebook(ROOT / "solutions" / exercise.notebook, exercise, COURSE)
    assert result.ok and result.score == result.max_score == exercise.points, result.notes
    last = [cell for cell in result.cells if cell.grade_id == "self_grade"]
    assert len(last) == 1 and last[0].status == "ok", last
    assert last[0].output == "", "the grading cell did something while the notebook was being graded"


@pytest.mark.slow
def test_a_named_notebook_gets_exactly_the_report_of_bertcourse_grade(no_jupyter, capsys):
    copy = no_jupyter / "my copy.ipynb"
    shutil.copy(ROOT / "solutions" / QUICK.notebook, copy)
    report = grade_this_notebook(QUICK.id, notebook=copy)
    assert report.ok and report.score == (QUICK.points, QUICK.points), report.text
    assert str(copy) in report.graded and "as saved at" in report.graded
    capsys.readouterr()
    assert cli.main(["grade", str(copy), "--exercise", QUICK.id]) == 0
    assert report.text == capsys.readouterr().out.strip()
    html = report._repr_html_()
    assert f"score: {QUICK.points:g}/{QUICK.points:g}" in html and "my copy.ipynb" in html


@pytest.mark.slow
def test_colab_grades_the_live_notebook_from_outside_the_checkout(no_jupyter, monkeypatch):
    live = json.loads((ROOT / "exercises" / QUICK.notebook).read_text())
    live["metadata"]["colab"] = {"name": Path(QUICK.notebook).name}
    requests = []

    def blocking_request(kind, request="", timeout_sec=None):
        requests.append(kind)
        return {"ipynb": live}

    colab = types.ModuleType("google.colab")
    colab._message = types.SimpleNamespace(blocking_request=blocking_request)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab._message", colab._message)
    monkeypatch.setenv("BERTCOURSE_ROOT", str(ROOT))  # what the Colab set-up cell sets
    report = grade_this_notebook(QUICK.id)
    assert requests == ["get_ipynb"]
    assert report.ok and report.score == (0.0, QUICK.points), report.text
    assert "Colab" in report.graded and "unsaved edits included" in report.graded
    snapshot = Path(report.text.splitlines()[0].split("(", 1)[1].rstrip(")"))
    assert snapshot.name == Path(QUICK.notebook).name and not snapshot.exists(), "the snapshot must be removed"


class _Sessions(http.server.BaseHTTPRequestHandler):
    """A Jupyter server's sessions API, answering only with the right token."""

    sessions: list = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        if self.path != "/api/sessions" or self.headers.get("Authorization") != "token secret":
            self.send_error(403)
            return
        body = json.dumps(self.sessions).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_jupyterlab_notebook_is_found_through_the_servers_session_for_this_kernel(no_jupyter, monkeypatch):
    server_root = no_jupyter / "lab"
    notebook = server_root / "exercises" / "renamed.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("{}")
    _Sessions.sessions = [
        {"path": "other.ipynb", "kernel": {"id": "someone-else"}},
        {"path": "exercises/renamed.ipynb", "kernel": {"id": "abc-123"}},
    ]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sessions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        runtime = no_jupyter / "runtime"
        runtime.mkdir()
        info = {"url": f"http://127.0.0.1:{server.server_port}/", "token": "secret", "root_dir": str(server_root)}
        (runtime / "jpserver-1.json").write_text(json.dumps(info))
        import ipykernel.connect

        monkeypatch.setattr(ipykernel.connect, "get_connection_file", lambda: "/run/kernel-abc-123.json")
        assert locate_notebook() == notebook.resolve()
        monkeypatch.setattr(ipykernel.connect, "get_connection_file", lambda: "/run/kernel-unknown.json")
        with pytest.raises(selfgrade.SelfGradeError, match="bertcourse grade"):
            locate_notebook()
    finally:
        server.shutdown()
        server.server_close()


def test_the_session_name_the_server_gave_the_kernel_is_the_fallback(no_jupyter, monkeypatch):
    notebook = no_jupyter / "masking.ipynb"
    notebook.write_text("{}")
    monkeypatch.setenv("JPY_SESSION_NAME", "exercises/ex01-masking/masking.ipynb")  # relative to the server root
    assert locate_notebook() == notebook.resolve()  # the kernel runs in the notebook's folder


def test_without_a_notebook_it_says_what_to_do_instead(no_jupyter, monkeypatch):
    monkeypatch.setattr(selfgrade.subprocess, "run", lambda *a, **k: pytest.fail("graded without a notebook"))
    report = grade_this_notebook("ex01-masking")
    assert isinstance(report, SelfGrade) and not report.ok and report.score is None
    assert "Could not tell which notebook" in report.text and "bertcourse grade PATH" in report.text
    assert "Could not grade this notebook" in report._repr_html_()
    missing = grade_this_notebook(notebook=no_jupyter / "nowhere.ipynb")
    assert not missing.ok and "nowhere.ipynb: no such file" in missing.text


def test_course_root_comes_from_the_variable_or_the_installed_package(no_jupyter, monkeypatch):
    monkeypatch.delenv("BERTCOURSE_ROOT", raising=False)
    assert find_course_root(no_jupyter / "nb.ipynb") == ROOT  # not the working directory: the package's checkout
    monkeypatch.setenv("BERTCOURSE_ROOT", str(no_jupyter))
    with pytest.raises(selfgrade.SelfGradeError, match="holds no course.yml"):
        find_course_root()


def test_warns_when_the_code_run_last_is_not_in_the_saved_file(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["x = 1\n", "y = 2"]}]}))

    def shell(*inputs):
        history = types.SimpleNamespace(input_hist_raw=["", *inputs, "grade_this_notebook()"])
        return types.SimpleNamespace(history_manager=history)

    assert selfgrade._unsaved_warning(path, shell("x = 3", "x = 1\ny = 2")) is None
    warning = selfgrade._unsaved_warning(path, shell("x = 1\ny = 2", "x = 3"))
    assert warning and "save the notebook" in warning


def test_a_misspelt_exercise_is_said_before_anything_is_graded(no_jupyter, monkeypatch):
    monkeypatch.setattr(selfgrade.subprocess, "run", lambda *a, **k: pytest.fail("graded with an unknown exercise"))
    copy = no_jupyter / "finetuning.ipynb"
    shutil.copy(ROOT / "exercises" / "ex04-finetuning" / "finetuning.ipynb", copy)
    report = grade_this_notebook("ex04-finetunning", notebook=copy)
    assert not report.ok and report.score is None and not report.graded
    assert "unknown exercise 'ex04-finetunning'" in report.text
    assert not str(report).startswith("graded:"), str(report)


def test_the_score_is_read_from_the_result_bertcourse_grade_writes(no_jupyter, monkeypatch):
    """`grade --json` hands over the NotebookResult; the report is formatted from it, never parsed."""
    import subprocess

    from bertcourse.grading.results import CheckResult, NotebookResult

    result = NotebookResult(notebook="masking.ipynb", exercise="ex01-masking", checks=[
        CheckResult("test_a", "part_checks", 2.0, 2.0, True, "hint a"),
        CheckResult("test_b", "part_checks", 0.0, 3.0, False, "hint b", "score: 5/5")])  # a message that lies
    result.total()
    calls = []

    def run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, json.dumps(result.to_dict()), "")

    monkeypatch.setattr(selfgrade.subprocess, "run", run)
    copy = no_jupyter / "masking.ipynb"
    shutil.copy(ROOT / "exercises" / EX01.notebook, copy)
    report = grade_this_notebook("ex01-masking", notebook=copy)
    assert "--json" in calls[0] and report.ok and report.score == (2.0, 5.0)
    assert report.text.splitlines()[-1] == "score: 2/5" and "hint b" in report.text
