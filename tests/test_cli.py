"""The `bertcourse` command answers --help everywhere, fast, and reports bad input in one line."""

import subprocess
import sys

import pytest

from bertcourse.cli import build_parser, main

SUBCOMMANDS = sorted(build_parser()._subparsers._group_actions[0].choices)


def test_every_issue_command_is_there():
    assert {"data", "pretrain", "release", "grade", "autograde", "validate"} <= set(SUBCOMMANDS)


def test_check_is_not_a_command(capsys):
    """`check` names the notebooks' self-checks and the hidden checks; course validation is `validate`."""
    assert "check" not in SUBCOMMANDS
    with pytest.raises(SystemExit) as info:
        main(["check"])
    assert info.value.code == 2
    assert "validate" in capsys.readouterr().err  # argparse lists the valid choices


def test_top_level_help_lists_every_subcommand():
    result = subprocess.run([sys.executable, "-m", "bertcourse.cli", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help(name, capsys):
    with pytest.raises(SystemExit) as info:
        main([name, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: bertcourse {name}" in out and len(out.splitlines()) > 3


def test_help_does_not_import_torch():
    code = "import sys; from bertcourse.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False"


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: bertcourse" in capsys.readouterr().out


def test_unknown_profile_is_one_line_and_exit_2(capsys):
    assert main(["data", "--profile", "tpu", "--source", "synthetic"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertcourse: error: unknown profile 'tpu'") and "Traceback" not in err


def test_instructor_command_without_nbgrader_says_which_extra_to_install():
    """A student's install (Colab's) has no nbgrader: `bertcourse release` says what to install, in one line."""
    code = ("import sys; sys.modules['nbgrader'] = None; from bertcourse.cli import main; "
            "sys.exit(main(['release', 'ex01-masking']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "bertcourse[instructor]" in result.stderr and "Traceback" not in result.stderr
