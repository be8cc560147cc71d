"""One class of submissions of the fixture course, graded once by `bertcourse autograde --jobs 2` and read by
test_autograde (grades, gradebook, reports) and test_feedback (the pages): a correct, a blank, a wrong and each
kind of broken submission, submissions that try to fool the checks, and what an editor leaves behind. The
solution carries a markdown cell of mathematics, and alice's and carol's code prints, for the feedback pages."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from batch_support import EXERCISE, make_course, renamed_grade_ids, solution, submit, tree_digest, with_cells

from bertcourse.authoring.release import release

MATH = ("The sum $a + b$ of many numbers is $$\\sum_{i=1}^{n} x_i = \\frac{n(n+1)}{2}$$ when $x_i = i$.")
# alice: right, printing a result and some HTML; carol: wrong (a - b), printing far more than a page shows
ALICE_ADD = ('def add(a, b):\n    return a + b\n\nprint("add(2, 3) =", add(2, 3))\n'
             'print("<script>alert(1)</script>")\n')
WRONG_ADD = 'def add(a, b):\n    return a - b\n\nprint("x" * 100_000)\n'
RIGHT_Q1 = 'answer_q1 = "b"\n'
# Submissions that try to score without solving anything; none may beat the blank release.
ATTACKS = {
    # an object that claims to equal anything, for both the function result and the answer
    "mallory_eq": {"add": "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
                          "def add(a, b):\n    return Anything()\n",
                   "q1": "answer_q1 = Anything()\n"},
    # leave the process with success before anything can fail
    "mallory_exit": {"add": "import os\nos._exit(0)\n"},
    # rewrite the hidden checks so that every check passes, then print a fake pytest summary
    "mallory_rewrite": {"add": "import os, pathlib\n"
                               "root = pathlib.Path(os.environ.get('BERTCOURSE_ROOT', '.'))\n"
                               "p = root / 'autograder/checks/fx01_add.py'\n"
                               "try:\n    p.write_text('def test_all(student):\\n    pass\\n')\n"
                               "except OSError:\n    pass\nprint('3 passed in 0.01s')\n"},
}


def make_batch(course, submitted: Path) -> None:
    nb = solution(course)
    blank = json.loads((course.root / "exercises" / EXERCISE / "add.ipynb").read_text())
    submit(submitted, "alice", with_cells(nb, {"add": ALICE_ADD}))
    submit(submitted, "bob", blank)
    submit(submitted, "carol", with_cells(nb, {"add": WRONG_ADD}))
    submit(submitted, "dave", '{"cells": [')  # not JSON
    submit(submitted, "erin", renamed_grade_ids(nb))  # another exercise's notebook
    submit(submitted, "frank", with_cells(nb, {"add": "import os\nos._exit(3)\n", "q1": RIGHT_Q1}))  # crash
    submit(submitted, "grace", with_cells(nb, {"add": "while True:\n    pass\n", "q1": RIGHT_Q1}))  # hang
    submit(submitted, "heidi", nb, name="my_add.ipynb")  # renamed notebook
    submit(submitted, "judy", None)  # empty folder
    submit(submitted, "kim", nb, exercise="no-such-exercise")
    for student, cells in ATTACKS.items():
        submit(submitted, student, with_cells(blank, cells))
    leave_editor_artefacts(submitted, nb)


def leave_editor_artefacts(submitted: Path, solved: dict) -> None:
    """What opening the submissions in JupyterLab, or a file manager, leaves behind: none of it is graded."""
    checkpoints = submitted / "bob" / EXERCISE / ".ipynb_checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "add-checkpoint.ipynb").write_text(json.dumps(solved))  # a stale copy, full marks
    (submitted / ".ipynb_checkpoints").mkdir()
    (submitted / "__pycache__").mkdir()
    (submitted / ".DS_Store").write_bytes(b"\0")
    (submitted / "bob" / ".ipynb_checkpoints").mkdir()
    submit(submitted, "bob~", solved)  # a backup copy of a student's folder
    submit(submitted, "carol", solved, name="add.ipynb~")


def with_math_cell(path: Path) -> None:
    nb = json.loads(path.read_text())
    nb["cells"].insert(1, {"cell_type": "markdown", "id": "math", "metadata": {}, "source": MATH})
    path.write_text(json.dumps(nb, indent=1))


def read_csv(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with path.open(newline="") as handle:
        return {(row["student"], row["exercise"]): row for row in csv.DictReader(handle)}


def run_cli(course, *args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "BERTCOURSE_ROOT": str(course.root)}
    return subprocess.Popen([sys.executable, "-m", "bertcourse.cli", "autograde", *args], env=env,
                            cwd=course.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)


def grade_class(folder: Path) -> dict:
    """The class batch graded by the command with two lanes (grace's hang stopped after 4 s, not 10), in a new
    copy of the fixture course in `folder`."""
    course = make_course(folder, check_time_limit_s=4)
    with_math_cell(course.root / "solutions" / EXERCISE / "add.ipynb")
    release(course)
    submitted = course.root / "submitted"
    make_batch(course, submitted)
    checks_before = (course.root / "autograder" / "checks" / "fx01_add.py").read_text()
    before = tree_digest(submitted)
    proc = run_cli(course, "submitted", "--jobs", "2")
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out + err
    return {"course": course, "submitted": submitted, "before": before, "out": out, "err": err,
            "checks_before": checks_before, "rows": read_csv(course.root / "grades.csv")}
