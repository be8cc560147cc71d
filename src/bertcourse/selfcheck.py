"""`check()`: readable self-checks inside a notebook, in plain JupyterLab and Colab alike.

A visible test cell calls `check(...)` once per property. A pass prints a tick; a failure prints what
was expected and a hint, then raises AssertionError so that the cell (and nbgrader) records a failure.
The autograder never trusts these cells: its hidden checks re-assert the same properties in a judge
process that the notebook cannot reach.
"""

from __future__ import annotations

from collections.abc import Callable


class CheckFailed(AssertionError):
    """A visible self-check failed; the message names the property and the hint."""


def check(description: str, condition: bool | Callable[[], object], hint: str = "") -> None:
    """Print a tick if `condition` holds, else print the hint and raise CheckFailed.

    `condition` may be a callable, so that an exception raised while evaluating it is reported as a
    failed check with its message instead of a bare traceback.
    """
    try:
        ok = bool(condition() if callable(condition) else condition)
        error = ""
    except Exception as exc:  # the student's code raised: report it as this check's failure
        ok, error = False, f" ({type(exc).__name__}: {exc})"
    if ok:
        print(f"\u2713 {description}")
        return
    message = f"\u2717 {description}{error}" + (f"\n  hint: {hint}" if hint else "")
    print(message)
    raise CheckFailed(message)
