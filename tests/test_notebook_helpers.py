"""The helpers every notebook calls: the profile choice and the visible self-check."""

import os

import pytest

from bertcourse.course import CourseError
from bertcourse.notebook import colab_url, execute_notebook, pick_profile
from bertcourse.selfcheck import CheckFailed, check, checks, not_done, todo


@pytest.fixture
def under_nbgrader(monkeypatch):
    """nbgrader's autograde or validate runs the notebook: a failing visible cell must fail."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")


def test_pick_profile_honours_the_variable_and_rejects_typos(monkeypatch, capsys):
    monkeypatch.setenv("BERTCOURSE_PROFILE", "cpu-quick")
    assert pick_profile() == "cpu-quick"
    assert "bertcourse profile: cpu-quick" in capsys.readouterr().out
    monkeypatch.setenv("BERTCOURSE_PROFILE", "cpu_quick")
    with pytest.raises(CourseError, match="unknown profile 'cpu_quick'"):
        pick_profile()


def test_a_lesson_on_a_laptop_defaults_to_the_cpu_profile_and_takes_a_name(monkeypatch):
    """Unconfigured, a lesson runs `cpu` (results that teach); commands and the grader stay on `cpu-quick`."""
    import torch

    from bertcourse.course import resolve_profile

    monkeypatch.delenv("BERTCOURSE_PROFILE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_profile() == "cpu"
    assert resolve_profile() == "cpu-quick"  # `bertcourse pretrain` without --profile
    assert resolve_profile(use_gpu=False, cpu_default="cpu") == "cpu-quick"  # grading never trains for long
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_profile() == "gpu"
    monkeypatch.setenv("BERTCOURSE_PROFILE", "cpu-quick")
    assert pick_profile("cpu") == "cpu"  # a name given in the notebook wins


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


def test_check_prints_a_tick_or_the_hint_and_raises(capsys, under_nbgrader):
    check("two plus two", 2 + 2 == 4)
    assert capsys.readouterr().out.startswith("\u2713 two plus two")
    with pytest.raises(CheckFailed):
        check("labels are -100 elsewhere", False, hint="unselected positions must not count in the loss")
    out = capsys.readouterr().out
    assert "\u2717 labels are -100 elsewhere" in out and "hint: unselected positions" in out


def test_check_reports_an_exception_in_the_students_code_as_a_failed_check(capsys, under_nbgrader):
    with pytest.raises(CheckFailed):
        check("the loss is finite", lambda: 1 / 0)
    assert "\u2717 the loss is finite (ZeroDivisionError: division by zero" in capsys.readouterr().out


def student_stub(*args):
    raise NotImplementedError()  # nbgrader's stub, as in a released notebook


def test_every_check_in_a_block_reports_and_the_block_fails_once_at_its_end(capsys, under_nbgrader):
    with pytest.raises(CheckFailed, match="2 of 3 checks failed") as failure:
        with checks():
            check("first", False, hint="hint one")
            check("second", lambda: 1 / 0, hint="hint two")
            check("third", True, hint="hint three")
    out = capsys.readouterr().out
    assert out.count("\u2717") == 2 and "hint: hint one" in out and "hint: hint two" in out and "\u2713 third" in out
    assert failure.value._render_traceback_() == [f"CheckFailed: {failure.value}"]  # IPython: no traceback


def test_a_failed_check_reports_and_lets_run_all_go_on(capsys, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with checks():
        check("first", False, hint="hint one")
        check("second", lambda: 1 / 0, hint="hint two")
        check("third", True, hint="hint three")
    check("on its own", False, hint="hint four")  # no exception: the cells after this one still run
    out = capsys.readouterr().out
    assert "\u2717 first" in out and "hint: hint two" in out and "\u2713 third" in out and "hint: hint four" in out
    assert "\u2717 2 of 3 checks failed" in out and "\u2717 1 of 1 checks failed" in out
    assert "Run All goes on" in out


def test_a_part_not_written_yet_says_so_and_lets_run_all_go_on(capsys, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with checks():
        check("a check that calls the stub", lambda: student_stub(1), hint="h")
        check("another one", lambda: student_stub(2), hint="h")
        result = student_stub()  # a call outside any check ends the block the same way
        check("never reached", result, hint="h")
    out = capsys.readouterr().out
    assert out.strip() == "\u2026 not done yet: implement `student_stub` above"  # once, and nothing else


def test_under_nbgrader_a_part_not_done_fails_its_cell(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(CheckFailed, match="not done yet: implement `student_stub`"):
        with checks():
            student_stub()
    with pytest.raises(CheckFailed, match="not done yet: set `answer_q1`"):
        not_done("set `answer_q1` above")


def test_an_error_outside_a_check_ends_the_block_as_a_failure_with_where_it_was_raised(capsys, under_nbgrader):
    def mask_tokens():
        return None

    with pytest.raises(CheckFailed, match="1 of 1 checks failed"):
        with checks():
            inputs, labels = mask_tokens()
    out = capsys.readouterr().out
    assert "\u2717 the remaining checks could not run (TypeError: cannot unpack non-iterable NoneType" in out
    assert "hint: the error comes from your code above" in out


def test_a_libraries_not_implemented_error_is_a_failure_not_a_part_not_done(capsys, under_nbgrader):
    import torch

    with pytest.raises(CheckFailed):
        with checks():
            check("the module runs", lambda: torch.nn.Module()(torch.zeros(1)), hint="write forward")
    assert "\u2717 the module runs (NotImplementedError: Module [Module] is missing" in capsys.readouterr().out


def test_todo_turns_only_the_stub_into_a_not_done_line(capsys):
    with todo("answer the questions"):
        student_stub()
    assert capsys.readouterr().out.strip() == "\u2026 not done yet: answer the questions"
    with todo():
        student_stub()
    assert "implement `student_stub` above" in capsys.readouterr().out
    with pytest.raises(ValueError), todo():  # any other error shows as usual
        int("not a number")


def test_colab_url_points_at_the_repository_file():
    assert colab_url("lessons/x.ipynb", "owner/repo", "main") == (
        "https://colab.research.google.com/github/owner/repo/blob/main/lessons/x.ipynb")
