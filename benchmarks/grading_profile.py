"""Where a warm grading lane's time per notebook goes: each grading step timed over repeated grades.

    .venv/bin/python benchmarks/grading_profile.py                  # ex01-masking's solution, 6 grades
    .venv/bin/python benchmarks/grading_profile.py --exercise ex05-metrics --repeats 4

One warm `Grader` (as in a lane of `bertcourse autograde`) grades the exercise's solution notebook again
and again; the steps of grading (steps.GRADING_STEPS), the worker's fork and start (which runs the
notebook's cells), the requests relayed to the student's functions and the judge's dialogue are timed.
Medians leave out the first grade (it pays for imports).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bertcourse.course import load_course  # noqa: E402
from bertcourse.grading import session, steps  # noqa: E402
from bertcourse.grading.engine import Grader  # noqa: E402

TIMES: dict[str, list[float]] = {}


def timed(name, function):
    """`function`, recording how long each call takes under `name`."""
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            TIMES.setdefault(name, []).append(time.perf_counter() - start)
    return wrapper


def main() -> None:
    """Grade the solution `--repeats` times with one warm Grader and print where the time went."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", default="ex01-masking")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    course = load_course(ROOT)
    exercise = course.exercise(args.exercise)
    notebook = course.root / "solutions" / exercise.notebook
    steps.GRADING_STEPS = tuple(timed(step.__name__, step) for step in steps.GRADING_STEPS)
    steps._judge_dialogue = timed("  judge dialogue", steps._judge_dialogue)
    session.NotebookSession._fork = timed("  worker fork", session.NotebookSession._fork)
    session.NotebookSession._start = timed("  worker start + notebook cells", session.NotebookSession._start)
    session.NotebookSession.relay = timed("  one relayed request", session.NotebookSession.relay)
    totals = []
    with Grader(course) as grader:
        start = time.perf_counter()
        grader.start()
        grader.checks(exercise)
        print(f"lane start (zygote, judge, collecting the checks): {time.perf_counter() - start:.2f} s")
        for _ in range(args.repeats):
            start = time.perf_counter()
            result = grader.grade(notebook, exercise)
            totals.append(time.perf_counter() - start)
            assert result.score == result.max_score, result.error
    for name, values in TIMES.items():
        if name != "  one relayed request":
            print(f"{name:34s} median {statistics.median(values[1:]):6.2f} s   (first grade {values[0]:.2f} s)")
    print(f"{'whole grade':34s} median {statistics.median(totals[1:]):6.2f} s   (first grade {totals[0]:.2f} s)")
    relays = TIMES.get("  one relayed request", [])
    per_grade = sum(relays) / len(totals)
    print(f"relayed requests: {len(relays) / len(totals):.0f} per grade, {per_grade:.2f} s per grade in all; "
          f"the judge's own share (the checks' computation, pytest): "
          f"{statistics.median(TIMES['  judge dialogue'][1:]) - per_grade:.2f} s per grade (medians)")


if __name__ == "__main__":
    main()
