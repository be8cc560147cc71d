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


def test_lanes_cover_every_test_folder_once():
    """The first lane's folders are exactly the ones the other lane ignores; every other folder of tests/
    is in the second lane (it runs `tests` itself)."""
    first, rest = lanes.LANES.values()
    assert rest[0] == "tests"
    assert sorted(arg.removeprefix("--ignore=") for arg in rest[1:]) == sorted(first)
    assert all((ROOT / folder).is_dir() for folder in first)


def test_no_test_of_the_first_lane_executes_a_lesson():
    """Lessons are executed once per process (tests/support/lesson_support.py): only the second lane may."""
    first, _ = lanes.LANES.values()
    executing = [str(path.relative_to(ROOT)) for folder in first for path in (ROOT / folder).rglob("test_*.py")
                 if "executed_lesson" in path.read_text() or "executed_again" in path.read_text()]
    assert not executing, executing
