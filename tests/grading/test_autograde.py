"""`bertcourse autograde` end to end: real nbgrader gradebook, real engine, one class of submissions.

One batch holds a correct, a blank, a wrong and each kind of broken submission, plus submissions that
try to fool the checks; it is graded by the command (`--jobs 2`, in a subprocess) and again in-process
with one lane, and both must agree. A second batch is killed half-way and resumed.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_support import (
    EXERCISE,
    hidden_source_lines,
    make_course,
    renamed_grade_ids,
    solution,
    submit,
    tree_digest,
    with_cells,
)

from bertcourse.authoring.release import release
from bertcourse.grading.batch.autograde import RESULT_NAME, BatchOptions, autograde
from bertcourse.grading.batch.gradebook import open_gradebook

pytestmark = pytest.mark.slow

WRONG_ADD = "def add(a, b):\n    return a - b\n"
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
    submit(submitted, "alice", nb)
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


def read_csv(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with path.open(newline="") as handle:
        return {(row["student"], row["exercise"]): row for row in csv.DictReader(handle)}


def run_cli(course, *args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "BERTCOURSE_ROOT": str(course.root)}
    return subprocess.Popen([sys.executable, "-m", "bertcourse.cli", "autograde", *args], env=env,
                            cwd=course.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class batch graded by the command with two lanes (grace's hang stopped after 4 s, not 10)."""
    course = make_course(tmp_path_factory.mktemp("batch") / "course", check_time_limit_s=4)
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


EXPECTED = {  # student: (status, score, add part, q1 part)
    "alice": ("graded", 3, 2, 1),
    "bob": ("graded", 0, 0, 0),
    "carol": ("graded", 1, 0, 1),
    "dave": ("void", 0, 0, 0),
    "erin": ("void", 0, 0, 0),
    "frank": ("graded", 1, 0, 1),
    "grace": ("graded", 1, 0, 1),
    "heidi": ("graded", 3, 2, 1),
    "judy": ("missing", 0, 0, 0),
}


def test_every_submission_gets_a_grade_and_a_reason(graded):
    rows = graded["rows"]
    assert len(rows) == len(EXPECTED) + 1 + len(ATTACKS)
    for student, (status, score, add, q1) in EXPECTED.items():
        row = rows[(student, EXERCISE)]
        assert (row["status"], float(row["score"]), float(row["add_checks"]), float(row["q1_checks"])) == (
            status, score, add, q1), row
        assert float(row["max_score"]) == 3
    assert "not valid JSON" in rows[("dave", EXERCISE)]["reason"]
    assert "not exercise" in rows[("erin", EXERCISE)]["reason"] or "belongs to" in rows[("erin", EXERCISE)]["reason"]
    assert "crashed" in rows[("frank", EXERCISE)]["reason"]
    assert rows[("grace", EXERCISE)]["reason"]  # the hanging cell is reported
    assert "my_add.ipynb" in rows[("heidi", EXERCISE)]["reason"]
    assert "no notebook submitted" in rows[("judy", EXERCISE)]["reason"]
    kim = rows[("kim", "no-such-exercise")]
    assert kim["status"] == "missing" and "not an exercise of this course" in kim["reason"]
    assert rows[("alice", EXERCISE)]["reason"] == ""
    assert rows[("alice", EXERCISE)]["submitted"] and not rows[("judy", EXERCISE)]["submitted"]


def test_the_class_report_says_what_the_class_got_wrong(graded):
    root = graded["course"].root
    report = {row["check"]: row for row in csv.DictReader((root / "class-report.csv").open(newline=""))}
    graded_rows = [r for r in graded["rows"].values() if r["status"] == "graded" and r["exercise"] == EXERCISE]
    passed_add = sum(1 for r in graded_rows if float(r["add_checks"]) == 2)
    small = report["test_add_small_integers"]
    assert int(small["graded"]) == len(graded_rows) and int(small["failed"]) == len(graded_rows) - passed_add
    assert small["misconception"] == "add() should return the sum of its two arguments"
    assert int(small["not_written"]) >= 1  # bob's blank notebook, counted apart from carol's mistake
    page = (root / "class-report.html").read_text()
    assert "dave" in page and "not valid JSON" in page  # the submissions that could not be graded
    assert "Scores" in page and "<script" not in page.lower()


def test_editor_artefacts_are_never_graded(graded):
    rows = graded["rows"]
    assert not [key for key in rows if key[0].startswith((".", "__")) or key[0].endswith("~")], sorted(rows)
    assert float(rows[("bob", EXERCISE)]["score"]) == 0  # not the full-marks checkpoint copy next to it
    assert float(rows[("carol", EXERCISE)]["score"]) == 1  # nor carol's backup of a solution
    feedback = graded["course"].root / "feedback"
    assert sorted(p.name for p in feedback.iterdir()) == sorted({student for student, _ in rows})


def test_attempts_to_fool_the_checks_score_no_more_than_a_blank_notebook(graded):
    blank = float(graded["rows"][("bob", EXERCISE)]["score"])
    for student in ATTACKS:
        assert float(graded["rows"][(student, EXERCISE)]["score"]) <= blank, student
    checks = graded["course"].root / "autograder" / "checks" / "fx01_add.py"
    assert checks.read_text() == graded["checks_before"]


def test_submissions_are_never_modified(graded):
    assert tree_digest(graded["submitted"]) == graded["before"]


def test_gradebook_holds_every_grade(graded):
    course = graded["course"]
    with open_gradebook(f"sqlite:///{course.root}/gradebook.db") as gradebook:
        for student, (status, score, add, q1) in EXPECTED.items():
            submission = gradebook.find_submission(EXERCISE, student)
            assert submission.score == pytest.approx(score), student
            assert gradebook.find_grade("add_checks", "add", EXERCISE, student).auto_score == add
            assert gradebook.find_grade("q1_checks", "add", EXERCISE, student).auto_score == q1
            if status != "missing":  # when it was submitted: the notebook's file time (no timestamp.txt here)
                assert submission.timestamp is not None, student
        assert gradebook.find_submission_notebook("add", EXERCISE, "dave").flagged
        assert not gradebook.find_submission_notebook("add", EXERCISE, "alice").flagged


def test_feedback_pages_show_results_but_no_hidden_test_source(graded):
    course = graded["course"]
    secret = hidden_source_lines(course)
    assert secret
    for (student, exercise), row in graded["rows"].items():
        page = (course.root / "feedback" / student / exercise / "feedback.html").read_text()
        assert f"{float(row['score']):g} / {float(row['max_score']):g} points" in page
        leaked = [line for line in secret if line in page]
        assert not leaked, (student, leaked)
        assert "test_add_small_integers" not in page  # check names stay with the instructor
        assert "hidden-check-source-must-never-reach-students" not in page
        assert str(course.root) not in page, (student, "the instructor's folders leak into the feedback page")
        mode = (course.root / "feedback" / student / exercise / "feedback.html").stat().st_mode & 0o777
        assert mode == 0o644, (student, oct(mode))  # ready to share, no chmod needed
    carol = (course.root / "feedback" / "carol" / EXERCISE / "feedback.html").read_text()
    assert "failed" in carol and "add() should return the sum of its two arguments" in carol
    assert "part <code>q1_checks</code>: 1 / 1 points" in carol
    assert "return a - b" in html.unescape(re.sub(r"<[^>]+>", "", carol))  # the student's own code is shown


def test_rerun_is_idempotent_and_jobs_1_agrees_with_jobs_2(graded, tmp_path):
    course = graded["course"]
    results = sorted((course.root / "autograded").rglob(RESULT_NAME))
    contents = {p: p.read_bytes() for p in results}
    summary = autograde(course, BatchOptions(graded["submitted"], progress=False), log=lambda _: None)
    assert summary.graded_now == 0 and summary.reused == len(graded["rows"])
    assert {p: p.read_bytes() for p in results} == contents
    assert read_csv(course.root / "grades.csv") == graded["rows"]

    serial = autograde(course, BatchOptions(graded["submitted"], output_dir=tmp_path, jobs=1,
                                            db_url=f"sqlite:///{tmp_path}/gradebook.db", progress=False),
                       log=lambda _: None)
    assert serial.graded_now == len(graded["rows"])
    keep = ("status", "score", "max_score", "add_checks", "q1_checks")
    again = read_csv(tmp_path / "grades.csv")
    assert {k: [r[c] for c in keep] for k, r in again.items()} == {
        k: [r[c] for c in keep] for k, r in graded["rows"].items()}


def test_bad_command_input_exits_2(graded, tmp_path, monkeypatch, capsys):
    from bertcourse import cli

    monkeypatch.setenv("BERTCOURSE_ROOT", str(graded["course"].root))
    monkeypatch.chdir(graded["course"].root)
    for args, message in [((str(tmp_path / "nowhere"),), "is not a folder"),
                          (("submitted", "--exercise", "nope"), "unknown exercise 'nope'"),
                          (("submitted", "--jobs", "0"), "--jobs must be at least 1")]:
        assert cli.main(["autograde", *args]) == 2
        assert message in capsys.readouterr().err


def test_a_killed_batch_resumes_without_regrading(tmp_path):
    course = make_course(tmp_path / "course")
    release(course)
    submitted = course.root / "submitted"
    slow = with_cells(solution(course), {"q1": 'import time\ntime.sleep(2)\nanswer_q1 = "b"\n'})
    students = [f"s{i}" for i in range(3)]  # killed after the first: 1 or 2 finished, the rest still to grade
    for student in students:
        submit(submitted, student, slow)

    proc = run_cli(course, "submitted", "--jobs", "1")
    results = course.root / "autograded"
    deadline = time.monotonic() + 600
    while not list(results.rglob(RESULT_NAME)) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    finished = {p: p.read_bytes() for p in results.rglob(RESULT_NAME)}
    assert 1 <= len(finished) < len(students), "the batch was not killed half-way"

    summary = autograde(course, BatchOptions(submitted, progress=False), log=lambda _: None)
    assert summary.reused == len(finished)
    assert summary.graded_now == len(students) - len(finished)
    assert {p: p.read_bytes() for p in finished} == finished  # finished results were not regraded
    rows = read_csv(course.root / "grades.csv")
    assert [float(rows[(s, EXERCISE)]["score"]) for s in students] == [3.0] * len(students)
    with open_gradebook(f"sqlite:///{course.root}/gradebook.db") as gradebook:
        assert [gradebook.find_submission(EXERCISE, s).score for s in students] == [3.0] * len(students)


def test_a_change_to_the_shared_check_helpers_regrades(tmp_path):
    """A finished result is reused only while nothing its grade depends on changed: the helpers that every
    exercise's checks share (`_common.py` next to them) count like the checks themselves."""
    from bertcourse.grading.batch.layout import exercise_fingerprint

    course = make_course(tmp_path / "course")
    exercise = course.exercise(EXERCISE)
    before = exercise_fingerprint(course, exercise)
    helpers = course.path(exercise.checks).parent / "_common.py"
    helpers.write_text("TOLERANCE = 1e-6\n")
    with_helpers = exercise_fingerprint(course, exercise)
    helpers.write_text("TOLERANCE = 1e-3\n")
    assert len({before, with_helpers, exercise_fingerprint(course, exercise)}) == 3
