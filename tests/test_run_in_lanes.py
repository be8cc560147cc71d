"""The lane runner behind `make test`: its lanes cover the suite once, and it reads pytest's closing line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("run_in_lanes", ROOT / "tests" / "run_in_lanes.py")
lanes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lanes)


def test_counts_reads_the_closing_line():
    log = "tests/a.py ....\n= 2 failed, 1040 passed, 1 skipped, 3 errors in 612.20s (0:10:12) =\n"
    assert lanes.counts(log) == {"failed": 2, "passed": 1040, "skipped": 1, "error": 3}
    assert lanes.counts("=== 5 passed in 1.00s ===") == {"passed": 5}
    assert lanes.counts("tests/a.py ..F\nKilled\n") == {}


def test_lanes_cover_every_test_file_once():
    """Collected as each lane collects: every test file of tests/ in exactly one lane, and the files named in
    SECOND_LANE_FILES really in the second (pytest drops an argument that lies inside another one's folder)."""
    first, rest = lanes.LANES.values()
    folders = [arg for arg in first if not arg.startswith("--ignore=")]
    assert folders == lanes.FIRST_LANE and all((ROOT / folder).is_dir() for folder in folders)
    ignored = {ROOT / arg.removeprefix("--ignore=") for arg in first if arg.startswith("--ignore=")}
    assert ignored == {ROOT / path for path in lanes.SECOND_LANE_FILES}

    def files(args, skip=frozenset()):
        found = []
        for arg in args:
            path = ROOT / arg
            found += [p for p in ([path] if path.is_file() else sorted(path.rglob("test_*.py"))) if p not in skip]
        return found

    in_first, in_second = files(folders, ignored), files(rest)
    assert not set(in_first) & set(in_second) and len(set(in_second)) == len(in_second)
    every = set((ROOT / "tests").rglob("test_*.py"))
    assert set(in_first) | set(in_second) == every
    nested = [a for a in rest for b in rest if a != b and (ROOT / a).is_relative_to(ROOT / b)]
    assert not nested, f"pytest would drop {nested}: inside another argument of the lane"


def test_no_test_of_the_first_lane_executes_a_lesson_or_shares_its_runs():
    """Lessons are executed once per process (tests/support/lesson_support.py) with the runs of the session's
    `quick_compare`: only the second lane may execute one or read those fixtures."""
    first, _ = lanes.LANES.values()
    ignored = {ROOT / arg.removeprefix("--ignore=") for arg in first if arg.startswith("--ignore=")}
    shared = ("executed_lesson", "executed_again", "quick_compare", "lesson_runs")
    executing = [str(path.relative_to(ROOT)) for folder in first if not folder.startswith("--ignore=")
                 for path in (ROOT / folder).rglob("test_*.py")
                 if path not in ignored and any(name in path.read_text() for name in shared)]
    assert not executing, executing
