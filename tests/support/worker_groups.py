"""Which tests must run in the same process when `make test` spreads the suite over two pytest-xdist workers.

`make test` runs `pytest -n 2 --dist loadgroup` with the scheduler of tests/conftest.py: a unit of work goes
whole to whichever worker is free next, so the two cores finish close together whatever the tests cost. A unit
must hold every test that shares work made once per process, or that work is made twice:

- `executed-lessons`: the files that read the executed lessons or `compare`'s runs (the session fixtures
  `quick_compare` and `lesson_runs`; tests/support/lesson_support.py executes each lesson once per process);
- `course-gradings`: the files that read the gradings of the course's own notebooks (tests/support/
  notebook_gradings.py, check_proofs.py: one grading per notebook and process, shared by the proof files and
  `validate`);
- `class-batch` and `postgresql-server`: the files that read tests/grading/conftest.py's session fixtures (one
  class graded by `autograde`; one PostgreSQL server);
- every other test file is a unit of its own (its module fixtures are made once).

A unit is known from the file alone (its path and the names its code uses): the controller, which hands the
units out, collects no tests. (pytest-xdist's own `xdist_group` marks do not group under pytest 9, which
ignores the node ids they rewrite.) Units that hold slow tests go first, so that quick ones fill the gaps at the end.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

# Each named unit: the names (fixtures, support modules) whose use in a test file's code puts the file in it
# (the first that matches).
SHARED_WORK = {
    "executed-lessons": ("quick_compare", "lesson_runs"),
    "course-gradings": ("notebook_gradings", "check_proofs"),
    "class-batch": ("class_batch",),
    "postgresql-server": ("postgres_url",),
}


def identifiers(text: str) -> set[str]:
    """The names a file's code uses (variables, arguments, attributes, imported modules and names), not the
    words of its comments and strings: a fixture named in a docstring does not make the file read it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(node.module.split("."))
    return names


def group_of(relative: str, text: str) -> str:
    """The unit of work of the tests of one file (`relative`: its path from the course root, as in a node id;
    `text`: its source): the named unit whose shared work its code reads, or the file's own."""
    used = identifiers(text)
    for group, names in SHARED_WORK.items():
        if used.intersection(names):
            return group
    return relative


@functools.cache
def file_group(root: Path, relative: str) -> str:
    """The unit of work of the test file `relative` (a node id's path, from the course root `root`)."""
    return group_of(relative, (root / relative).read_text())


def unit_of(root: Path, nodeid: str) -> str:
    """The unit of work of a test, from its node id (what both the workers and the controller have)."""
    return file_group(root, nodeid.split("::", 1)[0])


def slow_first(groups: list[str], slow: list[bool]) -> list[int]:
    """Positions of the tests in the order to hand them out: units holding a slow test first (the named groups
    before files), each unit's tests together and in their own order."""
    units: dict[str, list[int]] = {}
    for position, group in enumerate(groups):
        units.setdefault(group, []).append(position)
    has_slow = {group: any(slow[i] for i in positions) for group, positions in units.items()}
    order = sorted(units, key=lambda group: (not has_slow[group], group not in SHARED_WORK))
    return [position for group in order for position in units[group]]
