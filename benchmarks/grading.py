"""Batch grading throughput: plain serial `nbgrader autograde` against `bertcourse autograde --jobs 2`.

Both grade the same generated class of submissions (correct, partly done, blank, broken: not JSON, a
crashing cell) of one exercise, each from a cold start in its own process, in one run:

    .venv/bin/python benchmarks/grading.py                      # 16 submissions, --jobs 2
    .venv/bin/python benchmarks/grading.py --students 32 --jobs 2 --exercise ex01-masking

The exercise is the first one of course.yml with a solution notebook; while the course has none,
the grading engine's toy exercise (tests/fixtures/grading, exercise `toy`: two functions using torch
and a concept question) stands in. nbgrader runs the notebooks' visible tests in a fresh kernel per
notebook; bertcourse runs the hidden checks with warm helper processes. Prints notebooks per minute
for each and the ratio (target: >= 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOY_COURSE = ROOT / "tests" / "fixtures" / "grading"
sys.path.insert(0, str(ROOT / "src"))

from bertcourse.course import Course, Exercise, load_course  # noqa: E402

KINDS = ["correct", "correct", "partial", "blank", "correct", "partial", "not-json", "crash"]


def pick_exercise(requested: str | None, scratch: Path) -> tuple[Course, Exercise, str]:
    course = load_course(ROOT)
    candidates = [e for e in course.exercises if course.path(f"solutions/{e.notebook}").is_file()]
    if requested:
        return course, course.exercise(requested), "course exercise"
    if candidates:
        return course, candidates[0], "course exercise"
    # No real exercise yet: a scratch copy of the engine's toy course, with the course's nbgrader config.
    toy = scratch / "toycourse"
    shutil.copytree(TOY_COURSE, toy)
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", toy / "autograder" / "nbgrader_config.py")
    course = load_course(toy)
    return course, course.exercise("toy"), "toy exercise of tests/fixtures/grading (no course exercise yet)"


def make_submissions(course: Course, exercise: Exercise, release_nb: dict, submitted: Path, students: int) -> dict:
    """submitted/<student>/<exercise>/<name>.ipynb for `students` students, cycling through KINDS."""
    solution = json.loads(course.path(f"solutions/{exercise.notebook}").read_text())
    solution_ids = [c["metadata"]["nbgrader"]["grade_id"] for c in solution["cells"]
                    if c["metadata"].get("nbgrader", {}).get("solution")]
    released = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in release_nb["cells"]
                if c["metadata"].get("nbgrader", {}).get("solution")}
    counts: dict[str, int] = {}
    name = Path(exercise.notebook).name
    for i in range(students):
        kind = KINDS[i % len(KINDS)]
        counts[kind] = counts.get(kind, 0) + 1
        nb = json.loads(json.dumps(solution))
        for cell in nb["cells"]:
            grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if kind == "blank" and grade_id in released:
                cell["source"] = released[grade_id]
            if kind == "partial" and grade_id == solution_ids[-1]:
                cell["source"] = released[grade_id]  # the last part left undone
            if kind == "crash" and grade_id == solution_ids[0]:
                cell["source"] = "import os\nos._exit(1)\n"
        folder = submitted / f"student{i:03d}" / exercise.id
        folder.mkdir(parents=True)
        text = '{"cells": [' if kind == "not-json" else json.dumps(nb, indent=1)
        (folder / name).write_text(text)
    return counts


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--exercise", help="exercise id (default: the first with a solution, else the toy)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and print its path")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="bertcourse-bench-"))
    course, exercise, what = pick_exercise(args.exercise, scratch)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "BERTCOURSE_ROOT": str(course.root), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "BERTCOURSE_PROFILE": os.environ.get("BERTCOURSE_PROFILE", "cpu-quick")}

    # nbgrader's own course folder: the exercise's source, the course config, the submissions.
    nbg = scratch / "nbgrader"
    shutil.copytree(course.path(f"solutions/{exercise.id}"), nbg / "solutions" / exercise.id)
    (nbg / "autograder").mkdir()
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", nbg / "autograder" / "nbgrader_config.py")
    (nbg / "nbgrader_config.py").write_text('c = get_config()\nload_subconfig("autograder/nbgrader_config.py")\n')
    config: list[str] = []
    nbgrader = [str(bin_dir / "nbgrader")]
    proc = subprocess.run(nbgrader + ["generate_assignment", exercise.id, "--force", *config], env=env, cwd=nbg,
                          capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"nbgrader generate_assignment failed:\n{proc.stderr[-3000:]}")
    release_nb = json.loads((nbg / "exercises" / exercise.notebook).read_text())
    counts = make_submissions(course, exercise, release_nb, nbg / "submitted", args.students)
    print(f"exercise: {exercise.id} ({what}); {args.students} submissions: "
          + ", ".join(f"{n} {k}" for k, n in counts.items()))
    print(f"machine: {os.cpu_count()} cores; BERTCOURSE_PROFILE={env['BERTCOURSE_PROFILE']}")

    nbgrader_s, proc = timed(nbgrader + ["autograde", exercise.id, *config], env, nbg)
    graded = len(list((nbg / "autograded").glob(f"*/{exercise.id}/*.ipynb")))
    print(f"nbgrader autograde (serial):        {nbgrader_s:7.1f} s  {60 * args.students / nbgrader_s:6.1f} "
          f"notebooks/min  ({graded} of {args.students} written to autograded/, exit {proc.returncode})")

    # Like nbgrader's generate_assignment above (untimed), `bertcourse release` records the exercise in
    # the gradebook before any grading; the timed command then only grades.
    from bertcourse.grading.batch.gradebook import register_exercises

    out = scratch / "bertcourse"
    out.mkdir()
    register_exercises(course, [exercise], f"sqlite:///{out}/gradebook.db")
    command = [str(bin_dir / "bertcourse"), "autograde", str(nbg / "submitted"), "--jobs", str(args.jobs),
               "--output-dir", str(out), "--db-url", f"sqlite:///{out}/gradebook.db", "--no-progress"]
    ours_s, proc = timed(command, env, course.root)
    if proc.returncode:
        sys.exit(f"bertcourse autograde failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rows = (out / "grades.csv").read_text().splitlines()[1:]
    print(f"bertcourse autograde --jobs {args.jobs}:      {ours_s:7.1f} s  {60 * args.students / ours_s:6.1f} "
          f"notebooks/min  ({len(rows)} of {args.students} graded into grades.csv, gradebook and feedback)")
    print(f"ratio (bertcourse / nbgrader throughput): {nbgrader_s / ours_s:.2f}x")
    if args.keep:
        print(f"scratch folder: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
