"""Visible self-checks for the exercise notebooks: every check reports, and Run All reaches every part.

A visible test cell wraps its self-checks in `with checks():` and calls `check(description, condition, hint)`
once per property:

- a pass prints a tick;
- a failure prints a cross, what went wrong and the hint, and the cell goes on, so every check reports;
  an error raised by the student's code outside a `check` (say, while unpacking its result) is reported
  the same way, with where it was raised, and ends the block;
- at the end of the block, if anything failed, one line says how many: while a student works the cell
  ends there and Run All goes on, so every later part is still checked and the grading cell at the end
  shows the whole picture. Under nbgrader (`NBGRADER_EXECUTION`) one `CheckFailed` (an AssertionError) is
  raised instead, so the cell fails and plain nbgrader never gives a failing visible cell its points;
  IPython shows it as one line (`_render_traceback_`), never as a traceback into this module.

**Not done yet.** nbgrader's stub is `raise NotImplementedError()`. When a check's call hits it, the
block prints one line, e.g. "... not done yet: implement `mask_tokens` above", instead of a traceback, and
does *not* raise while a student works: a blank or half-done notebook runs to the end, so every later
part can be tried and checked. It does raise when `NBGRADER_EXECUTION` is set (nbgrader's autograde and
validate set it), so that plain nbgrader never gives a blank part the visible cell's points. The course's
own grader (`bertcourse grade`, `bertcourse autograde`) skips visible test cells altogether
(`grading/submission.py`, `NotebookCells.to_run`) and scores with the hidden checks only, which re-assert
these properties in a separate judge process; so the choice changes no course score.

`todo()` wraps code the student writes at the top level of a cell (the answers to the questions) or a
demo that calls their code: until that code exists, the stub's NotImplementedError becomes the same
not-done line instead of stopping Run All.

Words: these are *self-checks* (they score nothing); *hidden checks* are the autograder's
(`autograder/checks/`). The functions keep the short names `check` and `checks` because every exercise
notebook calls them.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

TICK, CROSS, WAIT = "\u2713", "\u2717", "\u2026"
GRADING_VARIABLE = "NBGRADER_EXECUTION"
_LIBRARY_DIRS = tuple(str(Path(p)) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                                   sysconfig.get_paths()["platlib"]})


class CheckFailed(AssertionError):
    """One or more visible self-checks failed; the message names them (their hints were printed)."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows this instead of a traceback: the checks' own output above says the rest."""
        return [f"{type(self).__name__}: {self}"]


def grading() -> bool:
    """True while nbgrader executes the notebook (autograde or validate)."""
    return bool(os.environ.get(GRADING_VARIABLE))


def _student_frame(tb: TracebackType | None) -> tuple[str, int] | None:
    """(qualified name, line) of the deepest frame outside this module and installed libraries."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename != __file__ and not code.co_filename.startswith(_LIBRARY_DIRS):
            found = (getattr(code, "co_qualname", code.co_name), tb.tb_lineno)
        tb = tb.tb_next
    return found


def _is_stub(exc: BaseException) -> bool:
    """A NotImplementedError raised by the student's own (unwritten) code, not by a library."""
    if not isinstance(exc, NotImplementedError):
        return False
    tb, last = exc.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is None or not last.tb_frame.f_code.co_filename.startswith(_LIBRARY_DIRS)


def _not_done_text(exc: BaseException) -> str:
    where = _student_frame(exc.__traceback__)
    if where is None or where[0] == "<module>":
        return "replace `raise NotImplementedError()` above with your code"
    return f"implement `{where[0]}` above"


def _error_text(exc: BaseException) -> str:
    where = _student_frame(exc.__traceback__)
    place = f", raised in `{where[0]}` line {where[1]}" if where and where[0] != "<module>" else ""
    message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}{': ' + message if message else ''}{place}"


class Checks:
    """The self-checks of one visible test cell; use as `with checks():` (see the module docstring)."""

    def __init__(self, part: str = ""):
        self.part = part
        self.passed = 0
        self.failed: list[str] = []
        self.not_done: list[str] = []

    def __enter__(self) -> Checks:
        _active.append(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        _active.remove(self)
        if exc is not None and not isinstance(exc, Exception):
            return False  # KeyboardInterrupt, SystemExit: not ours to swallow
        if exc is not None and _is_stub(exc):
            self.mark_not_done(_not_done_text(exc))
        elif isinstance(exc, CheckFailed):
            self.failed.append(str(exc))
        elif exc is not None:
            self.fail("the remaining checks could not run", _error_text(exc),
                      "the error comes from your code above: fix it, run that cell, then this one again")
        self.finish()
        return True

    def check(self, description: str, condition: bool | Callable[[], object], hint: str) -> bool:
        """Report one self-check, return whether it passed; an error in `condition` fails it, not the cell."""
        try:
            ok, error = bool(condition() if callable(condition) else condition), ""
        except Exception as exc:  # the student's code raised: this check's failure, or not written yet
            if _is_stub(exc):
                self.mark_not_done(_not_done_text(exc))
                return False
            ok, error = False, _error_text(exc)
        if ok:
            self.passed += 1
            print(f"{TICK} {description}")
        else:
            self.fail(description, error, hint)
        return ok

    def fail(self, description: str, error: str, hint: str) -> None:
        """Record and print a failed self-check; the block raises once, at its end (`finish`)."""
        self.failed.append(description)
        print(f"{CROSS} {description}" + (f" ({error})" if error else "") + (f"\n  hint: {hint}" if hint else ""))

    def mark_not_done(self, what: str) -> None:
        """Report a part that is not written yet, once per part."""
        if what not in self.not_done:
            self.not_done.append(what)
            print(f"{WAIT} not done yet: {what}")

    def finish(self) -> None:
        """Say how many checks failed; under nbgrader, raise CheckFailed if any failed or is not done."""
        total = self.passed + len(self.failed)
        if self.failed:
            summary = f"{len(self.failed)} of {total} checks failed: see the {CROSS} lines and their hints above"
            if grading():
                raise CheckFailed(summary) from None
            print(f"{CROSS} {summary}. Run All goes on; the grading cell at the end shows the whole picture.")
            return
        if self.not_done and grading():
            raise CheckFailed("not done yet: " + "; ".join(self.not_done)) from None


_active: list[Checks] = []


def checks(part: str = "") -> Checks:
    """A block whose `check` calls all report; at its end it says how many failed (under nbgrader it raises
    CheckFailed then)."""
    return Checks(part)


def check(description: str, condition: bool | Callable[[], object], hint: str = "") -> bool:
    """Print a tick if `condition` holds, else a cross and the hint; True when it held.

    `condition` may be a callable, so that an exception raised while evaluating it is reported as this
    check's failure (or as a part not done yet) instead of a traceback. Inside `with checks():` a
    failure is collected and summed up at the end of the block; on its own, `check` sums up at once.
    """
    if _active:
        return _active[-1].check(description, condition, hint)
    block = Checks()
    ok = block.check(description, condition, hint)
    block.finish()
    return ok


def not_done(what: str) -> None:
    """Report a part the student has not done yet (e.g. a question left unanswered)."""
    if _active:
        _active[-1].mark_not_done(what)
        return
    block = Checks()
    block.mark_not_done(what)
    block.finish()


@contextmanager
def todo(what: str = "") -> Iterator[None]:
    """Code the student writes (or that calls their code): while it is a stub, print one not-done line.

    Only the stub's NotImplementedError is caught; any other error shows as usual.
    """
    try:
        yield
    except NotImplementedError as exc:
        if not _is_stub(exc):
            raise
        print(f"{WAIT} not done yet: {what or _not_done_text(exc)}", file=sys.stdout)


__all__ = ["CheckFailed", "Checks", "check", "checks", "grading", "not_done", "todo"]
