"""Run the test suite as two pytest processes side by side, one per core: `make test` (what CI runs).

Why lanes and not pytest-xdist: the lessons are executed once per process and several test files read the
same executed lesson, so every test that executes a lesson must stay in one process; a lane is a fixed set of
folders, which keeps that true by construction. The first lane (check proofs, grading, authoring, then the
training commands) spends most of its time in sandboxed grading workers; the other runs the lessons, lessons 6-7's
models and the teaching modules' tests. The split balances the two (each ~20 minutes in the last CI rehearsal
on 2 cores); no test of the first lane executes a lesson.

Each lane gets one torch/OpenMP thread (two lanes on two cores; more threads would only contend) and
writes its own log; the logs are printed when both lanes have finished, then one closing line with the
counts of both. Exit status: 0 only when both lanes passed.

    python tests/run_in_lanes.py [pytest arguments for both lanes]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_LANE = ["tests/checks", "tests/grading", "tests/authoring", "tests/training"]
# Files of the first lane's folders that run in the second: test_compare shares a session fixture with the lessons
# (`quick_compare`, whose runs the executed lessons reuse; a session fixture lives in one process), and the torchrun
# tests (~3 minutes) balance the lanes (the last rehearsal: 25 and 18 minutes with them in the first).
SECOND_LANE_FILES = ["tests/training/test_compare.py", "tests/training/test_distributed.py"]


def second_lane() -> list[str]:
    """Every folder and test file directly in tests/ outside FIRST_LANE, then SECOND_LANE_FILES. Named one by one,
    not as `tests` with --ignore: pytest drops an argument inside another argument's folder, so `tests` plus
    `tests/training/test_compare.py` would never run that file."""
    tests = ROOT / "tests"
    entries = sorted(p.relative_to(ROOT).as_posix() for p in tests.iterdir()
                     if (p.is_dir() and any(p.rglob("test_*.py"))) or (p.is_file() and p.name.startswith("test_")
                                                                          and p.suffix == ".py"))
    return [entry for entry in entries if entry not in FIRST_LANE] + SECOND_LANE_FILES


LANES = {
    "grading and training": [*FIRST_LANE, *(f"--ignore={path}" for path in SECOND_LANE_FILES)],
    "lessons and the rest": second_lane(),
}
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def counts(log: str) -> dict[str, int]:
    """The counts of pytest's closing line in `log` ({} when it has none: the lane did not finish)."""
    closing = [line for line in log.splitlines() if re.match(r"=+ .*\d+ \w+.* in [\d.]+s", line)]
    if not closing:
        return {}
    return {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in COUNT.findall(closing[-1])}


def main(args: list[str]) -> int:
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    logs = {name: ROOT / f".pytest-lane-{i}.log" for i, name in enumerate(LANES)}
    started = time.monotonic()
    processes = {}
    for name, paths in LANES.items():
        with logs[name].open("w") as log:
            processes[name] = subprocess.Popen([sys.executable, "-m", "pytest", *paths, *args], cwd=ROOT, env=env,
                                               stdout=log, stderr=subprocess.STDOUT)
    codes = {name: process.wait() for name, process in processes.items()}
    total: dict[str, int] = {}
    for name in LANES:
        text = logs[name].read_text(errors="replace")
        print(f"\n{'#' * 30} lane: {name} (exit {codes[name]}) {'#' * 30}\n{text}", flush=True)
        for kind, n in counts(text).items():
            total[kind] = total.get(kind, 0) + n
        if not counts(text):
            total["failed"] = total.get("failed", 0) + 1  # a lane that never reached its summary
    minutes = (time.monotonic() - started) / 60
    print(f"both lanes finished in {minutes:.1f} minutes: " + ", ".join(f"{name} exit {code}"
                                                                        for name, code in codes.items()))
    failed = total.get("failed", 0) + total.get("error", 0)  # a collection or fixture error fails too
    skipped = f", {total['skipped']} skipped" if total.get("skipped") else ""
    print(f"tests: {total.get('passed', 0)} passed, {failed} failed{skipped}")
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
