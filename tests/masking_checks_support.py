"""Shared by the proofs of the masking exercises' hidden checks (tests/test_checks_ex01.py, ex02.py).

`run_checks` grades a source string with the real engine (worker, sandbox, judge) through
`bertcourse.grading.testing`, so a proof here is a proof of what a student's notebook would get.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

from bertcourse.grading.testing import run_check_module

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"hidden_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checks_of(check_module: str) -> dict[str, dict[str, Any]]:
    """{check name: its mark's kwargs (cell, points, feedback)} for a check module."""
    module = _load(ROOT / check_module)
    found = {}
    for name in dir(module):
        function = getattr(module, name)
        if name.startswith("test_") and callable(function):
            marks = [m for m in getattr(function, "pytestmark", []) if m.name == "check"]
            assert len(marks) == 1, f"{name} must carry exactly one check mark"
            found[name] = dict(marks[0].kwargs)
    return found


def run_checks(check_module: str, source: str, only: set[str] | None = None) -> dict[str, bool]:
    """{check name: passed} for `source` judged by `check_module` (a path relative to the course root)."""
    return run_check_module(ROOT / check_module, source, only=only)



def assert_passes_every_check(check_module: str, source: str, name: str) -> None:
    """A correct implementation must get every point, whatever order it draws its random numbers in."""
    results = run_checks(check_module, source)
    failed = sorted(check for check, passed in results.items() if not passed)
    assert not failed, f"a correct implementation ({name}) fails {failed}"


def assert_caught(check_module: str, source: str, targeted: set[str], misconception: str) -> None:
    """The checks aimed at a misconception must all fail an implementation that has it."""
    results = run_checks(check_module, source, only=targeted)
    assert targeted <= set(results), targeted - set(results)
    still_passing = sorted(check for check in targeted if results[check])
    assert not still_passing, f"{misconception!r} passes {still_passing}"


def assert_every_check_targeted(check_module: str, wrong: dict[str, tuple[str, set[str]]], cells: set[str]) -> None:
    """No check goes unproven: each is the target of some wrong implementation, and each is marked."""
    checks = checks_of(check_module)
    targeted = set().union(*(t for _, t in wrong.values() if len(t) < len(checks)))
    assert set(checks) == targeted, f"checks no wrong implementation targets: {sorted(set(checks) - targeted)}"
    for name, mark in checks.items():
        assert mark["cell"] in cells, name
        assert mark["points"] > 0 and mark["feedback"], name
