"""The helpers every notebook calls: the profile choice and the visible self-check."""

import os

import pytest

from bertcourse.course import CourseError
from bertcourse.notebook import colab_url, execute_notebook, pick_profile
from bertcourse.selfcheck import CheckFailed, check


def test_pick_profile_honours_the_variable_and_rejects_typos(monkeypatch, capsys):
    monkeypatch.setenv("BERTCOURSE_PROFILE", "cpu-quick")
    assert pick_profile() == "cpu-quick"
    assert "bertcourse profile: cpu-quick" in capsys.readouterr().out
    monkeypatch.setenv("BERTCOURSE_PROFILE", "cpu_quick")
    with pytest.raises(CourseError, match="unknown profile 'cpu_quick'"):
        pick_profile()


def test_pick_profile_defaults_to_cpu_without_cuda(monkeypatch):
    import torch

    monkeypatch.delenv("BERTCOURSE_PROFILE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_profile() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_profile() == "gpu"


def test_execute_notebook_gives_the_kernel_its_environment_and_restores_ours(tmp_path, monkeypatch):
    import nbformat
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("BERTCOURSE_PROFILE", "cpu")
    monkeypatch.delenv("BERTCOURSE_EXAMPLE", raising=False)
    code = ("import os, pathlib\n"
            "print(os.environ['BERTCOURSE_PROFILE'], os.environ['BERTCOURSE_EXAMPLE'], pathlib.Path.cwd())")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    execute_notebook(notebook, tmp_path, 60, {"BERTCOURSE_PROFILE": "cpu-quick", "BERTCOURSE_EXAMPLE": "yes"})
    assert notebook.cells[0].outputs[0]["text"].split() == ["cpu-quick", "yes", str(tmp_path)]
    assert os.environ["BERTCOURSE_PROFILE"] == "cpu" and "BERTCOURSE_EXAMPLE" not in os.environ

    failing = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        execute_notebook(failing, tmp_path, 60, {"BERTCOURSE_EXAMPLE": "again"})
    assert "BERTCOURSE_EXAMPLE" not in os.environ  # restored after a failure too


def test_check_prints_a_tick_or_the_hint_and_raises(capsys):
    check("two plus two", 2 + 2 == 4)
    assert capsys.readouterr().out.startswith("\u2713 two plus two")
    with pytest.raises(CheckFailed):
        check("labels are -100 elsewhere", False, hint="unselected positions must not count in the loss")
    out = capsys.readouterr().out
    assert "\u2717 labels are -100 elsewhere" in out and "hint: unselected positions" in out


def test_check_reports_an_exception_in_the_students_code_as_a_failed_check(capsys):
    with pytest.raises(CheckFailed, match="ZeroDivisionError"):
        check("the loss is finite", lambda: 1 / 0)


def test_colab_url_points_at_the_repository_file():
    assert colab_url("lessons/x.ipynb", "owner/repo", "main") == (
        "https://colab.research.google.com/github/owner/repo/blob/main/lessons/x.ipynb")
