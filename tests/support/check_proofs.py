"""Shared by the proofs of the exercises' hidden checks (tests/checks/test_checks_ex*.py).

`check_outcomes` grades a source string with the real engine (worker, sandbox, judge) through
`bertcourse.authoring.proofs`, so a proof here is a proof of what a student's notebook would get.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

from bertcourse.authoring.proofs import grade_source, run_check_module, shared_grader

ROOT = Path(__file__).resolve().parents[2]
CHECKS_DIR = ROOT / "autograder" / "checks"


@functools.cache
def _load(path: Path):
    if str(CHECKS_DIR) not in sys.path:  # the check modules import their shared helpers as `_common`
        sys.path.insert(0, str(CHECKS_DIR))
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


def notebook_cells(notebook: str) -> list[dict]:
    """The cells of a course notebook, by its path from the repository root."""
    return json.loads((ROOT / notebook).read_text())["cells"]


def reference_source(notebook: str, prelude: str = "") -> str:
    """The notebook's own solution cells after `prelude` (the imports of its set-up cell): the reference answer."""
    cells = notebook_cells(notebook)
    solutions = ("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("solution"))
    return prelude + "\n".join(solutions)


def graded_cells(notebook: str) -> dict[str, float]:
    """{grade_id: points} of the notebook's autograded cells."""
    return {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
            for c in notebook_cells(notebook) if c["metadata"].get("nbgrader", {}).get("grade")}


def assert_points_add_up(check_module: str, notebook: str) -> None:
    """Each autograded cell's points are the sum of its checks' points, and every check names such a cell."""
    per_cell: dict[str, float] = {}
    for mark in checks_of(check_module).values():
        per_cell[mark["cell"]] = per_cell.get(mark["cell"], 0.0) + mark["points"]
    assert per_cell == graded_cells(notebook)


def check_outcomes(check_module: str, source: str, only: set[str] | None = None) -> dict[str, bool]:
    """{check name: passed} for `source` judged by `check_module` (a path relative to the course root)."""
    return run_check_module(ROOT / check_module, source, only=only)



def assert_passes_every_check(check_module: str, source: str, name: str) -> None:
    """A correct implementation must get every point, whatever order it draws its random numbers in."""
    results = check_outcomes(check_module, source)
    failed = sorted(check for check, passed in results.items() if not passed)
    assert not failed, f"a correct implementation ({name}) fails {failed}"


def assert_caught(check_module: str, source: str, targeted: set[str], misconception: str,
                  must_pass: frozenset[str] = frozenset()) -> dict[str, bool]:
    """The checks aimed at a misconception must all fail an implementation that has it, and the checks in
    `must_pass` (properties it does not break) must pass it: other mistakes do not trip a check."""
    result = grade_source(ROOT / check_module, source, only=set(targeted) | set(must_pass))
    if result.error:
        raise AssertionError(f"grading {check_module} did not run: {result.error}")
    results = {c.name: c.passed for c in result.checks}
    assert set(targeted) | set(must_pass) <= set(results), (set(targeted) | set(must_pass)) - set(results)
    still_passing = sorted(check for check in targeted if results[check])
    assert not still_passing, f"{misconception!r} passes {still_passing}"
    tripped = sorted(check for check in must_pass if not results[check])
    assert not tripped, f"{misconception!r} also fails {tripped}, which it does not break"
    assert_reasons_say_more(result, misconception)
    return results


def assert_reasons_say_more(result, misconception: str) -> None:
    """Issue 26: the reason a check gives ("why:" under its hint) tells what the code did, or nothing (a bare
    assert, which the report leaves out); never the check's name again ("a pass@k differs" under "Pass at k
    unbiased"), which the report would have to drop."""
    from bertcourse.grading.judge import BARE_ASSERT
    from bertcourse.grading.report import why_line

    restating = [(c.name, c.message) for c in result.checks
                 if not c.passed and c.message and c.message != BARE_ASSERT and not why_line(c)]
    assert not restating, f"{misconception!r}: reasons that only repeat their check's name: {restating}"


def wrong_entry(entry: tuple) -> tuple[str, set[str], frozenset[str]]:
    """(source, targeted checks, checks that must still pass) from a WRONG table entry of 2 or 3 items."""
    source, targeted, *rest = entry
    return source, set(targeted), frozenset(rest[0]) if rest else frozenset()


def assert_every_check_targeted(check_module: str, wrong: dict[str, tuple], cells: set[str]) -> None:
    """No check goes unproven: each is the target of some wrong implementation, and each is marked."""
    checks = checks_of(check_module)
    targets = [wrong_entry(entry)[1] for entry in wrong.values()]
    targeted = set().union(*(t for t in targets if len(t) < len(checks)))
    assert set(checks) == targeted, f"checks no wrong implementation targets: {sorted(set(checks) - targeted)}"
    for name, mark in checks.items():
        assert mark["cell"] in cells, name
        assert mark["points"] > 0 and mark["feedback"], name


def assert_scores_zero(check_module: str, sources: dict[str, str], what: str) -> None:
    """A notebook that does not do the work (stubs returning their input, raising NotImplementedError, or
    returning well-formed nothing) must score exactly 0: no side condition pays for a stub."""
    result = grade_source(ROOT / check_module, sources)
    assert not result.error, result.error
    passed = sorted(check.name for check in result.checks if check.passed)
    assert not passed and result.score == 0, f"{what} scores {result.score}: {passed} pass"


def assert_release_scores_zero(notebook: str, exercise: str) -> None:
    """The student release (exercises/), graded as it is handed out, scores exactly 0."""
    result = shared_grader().grade(ROOT / notebook, exercise)
    assert not result.error, result.error
    passed = sorted(check.name for check in result.checks if check.passed)
    assert not passed and result.score == 0 and result.max_score > 0, f"the release scores {result.score}: {passed}"


def common():
    """autograder/checks/_common.py, the constants and bounds the masking checks share."""
    return _load(CHECKS_DIR / "_common.py")


def visible_cell(notebook: str, grade_id: str) -> str:
    """The source of a visible test cell of a solution notebook."""
    import nbformat

    nb = nbformat.read(ROOT / notebook, as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def visible_bounds(source: str, variable: str) -> tuple[float, float]:
    """(low, high) of a visible test's `low < variable < high`."""
    import re

    found = re.findall(rf"([0-9.]+) < {variable} < ([0-9.]+)", source)
    assert len(found) == 1, f"no single `low < {variable} < high` in the visible test"
    return float(found[0][0]), float(found[0][1])


def assert_contains_hidden_range(bounds: tuple[float, float], trials: int, p: float, slack: float = 0.0) -> None:
    """A visible `low < share < high` over at least `trials` trials accepts every share the hidden checks
    accept (their exact binomial range at TAIL, widest at the fewest trials), so no correct answer fails it."""
    lo, hi = common().binomial_range(trials, p, common().TAIL)
    assert bounds[0] < lo / trials - slack and hi / trials + slack < bounds[1], (
        f"visible bounds {bounds} do not contain the hidden range [{lo / trials:.4f}, {hi / trials:.4f}] "
        f"at {trials} trials")


def failure_message(check_module: str, source: str, check: str) -> str:
    """The student-facing reason `check` gives for `source`, which must fail it."""
    result = grade_source(ROOT / check_module, source, only={check})
    assert check in result.failed_checks(), check
    return result.check(check).message


# A solution region of an nbgrader source notebook, and a function header (name, parameters).
REGION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?", re.DOTALL | re.MULTILINE)
DEF = re.compile(r"^[ \t]*def (\w+)\(([^)]*)\)", re.MULTILINE)


def stubbed(source: str, stub: str, keep_init: bool = False) -> str:
    """`source` with each solution region replaced: nbgrader's NotImplementedError ("raise"), or returning the
    enclosing function's first argument ("return"; nothing in __init__ or at the top level). `keep_init`
    keeps the real __init__ (the attributes exist, every function is a stub)."""

    def replace(match: re.Match) -> str:
        indent = match.group(1)
        functions = DEF.findall(source[:match.start()])
        name, params = functions[-1] if functions and indent else ("", "")
        if keep_init and name == "__init__":
            return match.group(0)
        if stub == "raise":
            return f"{indent}raise NotImplementedError()\n"
        args = [a.split("=")[0].strip() for a in params.split(",") if a.strip() not in ("self", "")]
        return f"{indent}return {args[0]}\n" if name and name != "__init__" and args else f"{indent}pass\n"

    return REGION.sub(replace, source)
