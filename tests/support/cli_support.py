"""Running `bertcourse ...` inside the test's own process, read back like a finished subprocess."""

from __future__ import annotations

import subprocess


def cli_in_this_process(args: list[str], capsys) -> subprocess.CompletedProcess:
    """`bertcourse ARGS` through the CLI's own `main`, in this process: the exit status and what it printed, as
    `subprocess.run` would give them, without paying for another interpreter and torch import."""
    from bertcourse.cli import main

    capsys.readouterr()
    code = main(args)
    said = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, said.out, said.err)
