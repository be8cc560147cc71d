"""Shared by the proofs of the exercises' hidden checks (tests/checks/test_checks_ex*.py).

`check_outcomes` grades a source string with the real engine (worker, sandbox, judge) through
`bertcourse.authoring.proofs`, so a proof here is a proof of what a student's notebook would get.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import re
from pathlib import Path

from check_marks import CHECKS_DIR, _load, checks_of
from notebook_gradings import graded_notebook

from bertcourse.authoring.proofs import grade_source, run_check_module

ROOT = Path(__file__).resolve().parents[2]


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


def assert_points_add_up(check_module: str, notebook: str, exercise_id: str | None = None) -> None:
    """Each autograded cell's points are the sum of its checks' points, and every check names such a cell; with
    `exercise_id`, the cells' points also add up to the exercise's points in course.yml."""
    per_cell: dict[str, float] = {}
    for mark in checks_of(check_module).values():
        per_cell[mark["cell"]] = per_cell.get(mark["cell"], 0.0) + mark["points"]
    assert per_cell == graded_cells(notebook)
    if exercise_id is not None:
        from bertcourse.course import load_course

        assert load_course(ROOT).exercise(exercise_id).points == sum(per_cell.values())


def check_outcomes(check_module: str, source: str, only: set[str] | None = None) -> dict[str, bool]:
    """{check name: passed} for `source` judged by `check_module` (a path relative to the course root)."""
    return run_check_module(ROOT / check_module, source, only=only)



def assert_solution_passes_every_check(notebook: str, exercise: str) -> None:
    """The solution notebook, graded whole as a student's would be, gets every point of every check. (It holds
    the reference answer of the exercise's proofs, so this proves the reference passes every check too, and
    its grading is the one `validate_course` and self-grading read back.)"""
    result = graded_notebook(notebook, exercise)
    assert not result.error, result.error
    failed = sorted(check.name for check in result.checks if not check.passed)
    assert not failed and result.checks and result.score == result.max_score > 0, (
        f"the solution notebook fails {failed} ({result.score}/{result.max_score})")


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
    """(source, targeted checks, checks that must still pass) from a WRONG table entry of 2 to 4 items (the
    4th, for `assert_bundle_caught`: {check: words its message must hold})."""
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
    """The student release (exercises/), graded as it is handed out, scores exactly 0. It is nbgrader's
    raise stub of the solution (asserted here), so this is also the proof that the raise stub scores 0."""
    assert_release_is_the_raise_stub(notebook, notebook.replace("exercises/", "solutions/", 1))
    result = graded_notebook(notebook, exercise)
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


# ----------------------------------------------------------------------------- bundled misconceptions
#
# One grading proves several misconceptions at once when none of them can move another's checks: each
# misconception changes some top-level definitions of a correct base source (functions, classes, answers),
# and the checks asked about it (those aimed at it and those it must still pass) reach the notebook only
# through the names they spell out. Two misconceptions share a bundle only when neither changes a name the
# other's checks reach (directly, or through the functions of its own source that those call) and they
# change different definitions; the bundled source is then, for each one's checks, the same program as its
# own source, so the grading of the bundle says for each what its own grading would have said.


@functools.cache
def _units(source: str) -> dict[tuple[str, int], str]:
    """{(name, occurrence): text} of the top-level statements of `source` (a def or class by its name, an
    import, assignment or block by the names it binds, anything else as the n-th such statement)."""
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    units: dict[tuple[str, int], str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            name = "import " + ",".join(a.asname or a.name for a in node.names)
        else:  # an assignment, or a block (`with`, `if`, ...) by the names assigned in it
            stored = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)})
            name = "=" + ",".join(stored) if stored else "<statement>"
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        occurrence = sum(1 for key in units if key[0] == name)
        units[(name, occurrence)] = "".join(lines[first - 1:node.end_lineno])
    return units


def _bound(key: tuple[str, int]) -> set[str]:
    """The names a top-level unit binds."""
    name = key[0]
    if name.startswith("import "):
        return {n.split(".")[0] for n in name[len("import "):].split(",")}
    if name.startswith("="):
        return set(name[1:].split(","))
    return set() if name.startswith("<") else {name}


def _assignments(text: str) -> tuple[str, dict[str, list[str]]]:
    """A block's code with its assignments taken out, and {name: the assignments to it}: two versions of a
    block that differ only in what they assign to some names change those names only."""
    assigned: dict[str, list[str]] = {}

    class TakeOut(ast.NodeTransformer):
        def visit_Assign(self, node: ast.AST) -> ast.AST:  # noqa: N802 - ast's naming
            for name in ast.walk(node):
                if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                    assigned.setdefault(name.id, []).append(ast.unparse(node))
            return ast.Pass()

        visit_AnnAssign = visit_AugAssign = visit_Assign  # noqa: N815

    rest = ast.unparse(TakeOut().visit(ast.parse(text)))
    return rest, assigned


@functools.cache
def changed_names(source: str, base: str) -> frozenset[str]:
    """The top-level names whose definition differs between `source` and `base` (added, removed or edited; in
    a block of assignments, the names whose assignments differ); "<top level>" when a statement that binds no
    name differs."""
    mine, theirs = _units(source), _units(base)
    names: set[str] = set()
    for key in mine.keys() ^ theirs.keys() | {k for k in mine.keys() & theirs.keys() if mine[k] != theirs[k]}:
        if key in mine and key in theirs and key[0].startswith("="):
            (rest, assigned), (base_rest, base_assigned) = _assignments(mine[key]), _assignments(theirs[key])
            if rest == base_rest:
                names |= {n for n in assigned.keys() | base_assigned.keys() if assigned.get(n) != base_assigned.get(n)}
                continue
        names |= _bound(key) or {"<top level>"}
    return frozenset(names)


@functools.cache
def _uses(source: str) -> dict[str, set[str]]:
    """{top-level name: the names its definitions use} in `source`."""
    def names(text: str) -> set[str]:  # those it reads (a definition reads its decorators, defaults, body)
        return {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}

    uses: dict[str, set[str]] = {}
    for key, text in _units(source).items():
        if key[0].startswith("="):  # a block of assignments: a name uses what its assignments and the block do
            rest, assigned = _assignments(text)
            for name in _bound(key):
                uses.setdefault(name, set()).update(names(rest), *map(names, assigned.get(name, [])))
            continue
        for name in _bound(key):
            uses.setdefault(name, set()).update(names(text))
    return uses


def _reached(source: str, names: set[str]) -> set[str]:
    """`names` and every top-level name of `source` their definitions use, transitively."""
    uses = _uses(source)
    reached, todo = set(), set(names)
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo |= uses.get(name, set()) - reached
    return reached


FRAGMENT = "\0f-string piece:"


@functools.cache
def _check_strings(check_module: str) -> dict[str, frozenset[str]]:
    """{check: every string constant it can use}: its own, those of the fixtures it asks for, and those of the
    functions and constants of its module and of _common.py it refers to, transitively (the constant pieces of
    an f-string marked with FRAGMENT)."""
    definitions: dict[str, ast.AST] = {}
    for path in (CHECKS_DIR / "_common.py", ROOT / check_module):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                definitions[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            definitions[name.id] = node

    def strings(name: str) -> frozenset[str]:
        found, seen, todo = set(), set(), [name]
        while todo:
            current = todo.pop()
            if current in seen or current not in definitions:
                continue
            seen.add(current)
            node = definitions[current]
            for sub in ast.walk(node):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    found.add(sub.value)
                elif isinstance(sub, ast.JoinedStr):  # an f-string: its pieces may be parts of a name
                    found |= {FRAGMENT + part.value for part in sub.values
                              if isinstance(part, ast.Constant) and isinstance(part.value, str)}
                elif isinstance(sub, ast.Name):
                    todo.append(sub.id)
                elif isinstance(sub, ast.arg):
                    todo.append(sub.arg)  # a fixture
        return frozenset(found)

    return {name: strings(name) for name in checks_of(check_module)}


@functools.cache
def _check_reach(check_module: str, check: str, source: str) -> frozenset[str]:
    strings = _check_strings(check_module)[check]
    defined = set().union(*map(_bound, _units(source)))
    pieces = {s[len(FRAGMENT):] for s in strings if s.startswith(FRAGMENT)}
    named = {name for name in defined
             if any(s == name or re.search(rf"\b{re.escape(name)}\b", s) for s in strings)
             or any(len(piece.strip()) >= 3 and piece.strip() in name for piece in pieces)}
    return frozenset(_reached(source, named))


def check_reach(check_module: str, checks: set[str], source: str) -> set[str]:
    """The top-level names of `source` that `checks` can reach: those a string of theirs names (as the whole
    string or a word in it, or a piece of an f-string that may build it), and what those use in `source`."""
    return set().union(*(_check_reach(check_module, check, source) for check in checks))


def asked_checks(check_module: str, base: str, entry: tuple) -> set[str]:
    """The checks a grading must run to prove a misconception (source, targeted, must_pass): those aimed at
    it, and those it must still pass that reach a definition it changes. A must-pass check that reaches none
    runs the very code of `base` (a correct implementation, proven to pass every check), so it passes."""
    source, targeted, must_pass = entry
    changed = changed_names(source, base)
    if "<top level>" in changed:
        return set(targeted) | set(must_pass)
    return set(targeted) | {check for check in must_pass if changed & check_reach(check_module, {check}, source)}


def _clash(check_module: str, base: str, a: tuple, b: tuple) -> str:
    """Why two misconceptions (source, targeted, must_pass) cannot share a grading, or ""."""
    changed_a, changed_b = changed_names(a[0], base), changed_names(b[0], base)
    if changed_a & changed_b or "<top level>" in changed_a | changed_b:
        return f"both change {sorted(changed_a & changed_b) or ['the top level']}"
    asked_a, asked_b = asked_checks(check_module, base, a), asked_checks(check_module, base, b)
    if set(a[1]) & asked_b or set(b[1]) & asked_a:
        return f"aimed at the same checks {sorted(set(a[1]) & asked_b | set(b[1]) & asked_a)}"
    for (x, changed_y, asked_x) in ((a, changed_b, asked_a), (b, changed_a, asked_b)):
        if reached := changed_y & check_reach(check_module, asked_x, x[0]):
            return f"one changes {sorted(reached)}, which the other's checks reach"
    return ""


def _bundle_problem(check_module: str, base: str, entries: dict[str, tuple]) -> str:
    """Why the misconceptions `entries` ({name: (source, targeted, must_pass)}) cannot share a grading, or "":
    two clash, their edits overlap, or the merged source differs from one's own in a name its checks reach."""
    names = list(entries)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if why := _clash(check_module, base, entries[a], entries[b]):
                return f"{a!r} and {b!r}: {why}"
    if len(entries) == 1:
        return ""
    merged = _merged([entry[0] for entry in entries.values()], base)
    if merged is None:
        return "their edits overlap"
    for name, entry in entries.items():
        reach = check_reach(check_module, asked_checks(check_module, base, entry), entry[0])
        if differs := changed_names(merged, entry[0]) & reach:
            return f"the bundled source differs from {name!r}'s own in {sorted(differs)}, which its checks reach"
    return ""


def bundle_misconceptions(check_module: str, wrong: dict[str, tuple], base: str) -> list[tuple[str, ...]]:
    """The misconceptions of `wrong` ({name: (source, targeted[, must_pass])}, sources written against the
    correct `base`) in bundles, greedily in table order: each joins the first bundle it can share a grading
    with (`_bundle_problem`)."""
    bundles: list[list[str]] = []
    for name in wrong:
        for bundle in bundles:
            if not _bundle_problem(check_module, base, {n: wrong_entry(wrong[n]) for n in [*bundle, name]}):
                bundle.append(name)
                break
        else:
            bundles.append([name])
    return [tuple(bundle) for bundle in bundles]


def assert_bundles_sound(check_module: str, wrong: dict[str, tuple], base: str,
                         bundles: list[tuple[str, ...]]) -> None:
    """Every misconception is in exactly one bundle, and no two in a bundle change the same definition, are
    aimed at the same checks, or change what the other's checks reach; the bundled source is, for each, its
    own source in everything its checks reach."""
    assert sorted(name for bundle in bundles for name in bundle) == sorted(wrong)
    for bundle in bundles:
        why = _bundle_problem(check_module, base, {name: wrong_entry(wrong[name]) for name in bundle})
        assert not why, f"{bundle} share a grading but {why}"


def _merged(sources: list[str], base: str) -> str | None:
    """`base` with the edits of every source applied (line by line, as a diff), or None when two edit the same
    lines (or insert at the same place)."""
    lines = base.splitlines(keepends=True)
    hunks = []
    for source in sources:
        mine = source.splitlines(keepends=True)
        matcher = difflib.SequenceMatcher(None, lines, mine, autojunk=False)
        hunks += [(i1, i2, mine[j1:j2]) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"]
    hunks.sort(key=lambda hunk: (hunk[0], hunk[1]))
    for (a1, a2, _), (b1, _b2, _) in zip(hunks, hunks[1:]):
        if b1 < a2 or b1 == a1:
            return None
    for i1, i2, new in reversed(hunks):
        lines[i1:i2] = new
    return "".join(lines)


def bundled_source(sources: list[str], base: str) -> str:
    """`base` with the edits of each of `sources` (they edit different lines)."""
    merged = _merged(sources, base)
    assert merged is not None, "the bundled sources edit the same lines"
    return merged


def assert_bundle_caught(check_module: str, wrong: dict[str, tuple], base: str, bundle: tuple[str, ...]) -> None:
    """One grading of the bundle's sources merged: each misconception fails the checks aimed at it and passes
    the checks it must not break (`assert_caught` for each, on one grading). `base` must be one of the correct
    implementations the file proves to pass every check (see `asked_checks`)."""
    entries = {name: wrong_entry(wrong[name]) for name in bundle}
    source = bundled_source([entry[0] for entry in entries.values()], base) if len(bundle) > 1 \
        else entries[bundle[0]][0]
    asked = set().union(*(asked_checks(check_module, base, entry) for entry in entries.values()))
    result = grade_source(ROOT / check_module, source, only=asked)
    if result.error:
        raise AssertionError(f"grading {check_module} for {list(bundle)} did not run: {result.error}")
    results = {c.name: c.passed for c in result.checks}
    assert asked <= set(results), asked - set(results)
    for name, (_, targeted, must_pass) in entries.items():
        still_passing = sorted(check for check in targeted if results[check])
        assert not still_passing, f"{name!r} passes {still_passing}"
        own = asked_checks(check_module, base, (_, targeted, must_pass))  # another's checks may fail here
        tripped = sorted(check for check in must_pass & own if not results[check])
        assert not tripped, f"{name!r} also fails {tripped}, which it does not break"
        for check, words in (wrong[name][3] if len(wrong[name]) > 3 else {}).items():
            assert words in result.check(check).message, (name, check, result.check(check).message)
    assert_reasons_say_more(result, " + ".join(bundle))


def bundle_ids(bundles: list[tuple[str, ...]]) -> list[str]:
    """Test ids of bundles: their misconceptions' names."""
    return [" + ".join(bundle) for bundle in bundles]


def assert_release_is_the_raise_stub(release: str, notebook: str) -> None:
    """The release's solution cells are the solution's with every region replaced by nbgrader's `raise
    NotImplementedError()` (`stubbed(..., "raise")`, less nbgrader's "# YOUR CODE HERE" line): the release's
    grading, which must score 0, is the grading of that stub, so the stub needs no grading of its own."""
    def solution_cells(path: str) -> dict[str, str]:
        return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in notebook_cells(path)
                if c["metadata"].get("nbgrader", {}).get("solution")}

    released, solution = solution_cells(release), solution_cells(notebook)
    assert list(released) == list(solution), (list(released), list(solution))
    for grade_id, source in solution.items():
        got = "\n".join(line for line in released[grade_id].splitlines() if line.strip() != "# YOUR CODE HERE")
        assert got.rstrip() == stubbed(source, "raise").rstrip(), grade_id


def assert_hints_name(check_module: str, source: str, among: set[str], expected: dict[str, str],
                      not_named: tuple[str, ...] = ()) -> None:
    """Issue 36: graded by the checks `among` (e.g. every check of one part), a planted mistake fails exactly the
    checks of `expected`, and each one's hint (a Diagnosis of what the code did, else the check's feedback) holds
    the words given for it, naming that mistake, and none of `not_named` (the words of other mistakes' hints)."""
    result = grade_source(ROOT / check_module, source, only=set(among))
    assert not result.error, result.error
    failed = {check.name for check in result.checks if not check.passed}
    assert failed == set(expected), f"fails {sorted(failed)}, not {sorted(expected)}"
    for name, words in expected.items():
        hint = result.check(name).feedback
        assert words.lower() in hint.lower(), f"{name}'s hint does not say {words!r}: {hint!r}"
        named = [other for other in not_named if other.lower() in hint.lower()]
        assert not named, f"{name}'s hint names another mistake ({named}): {hint!r}"
