"""`bertcourse autograde` end to end: real nbgrader gradebook, real engine, one class of submissions.

One batch holds a correct, a blank, a wrong and each kind of broken submission, plus submissions that
try to fool the checks (tests/support/class_batch.py, whose feedback pages test_feedback reads); it is graded
by the command (`--jobs 2`, in a subprocess) and again in-process with one lane, and both must agree. A second
batch is killed half-way and resumed.
"""

from __future__ import annotations

import csv
import html
import os
import re
import signal
import time

import pytest
from batch_support import EXERCISE, hidden_source_lines, make_course, solution, submit, tree_digest, with_cells
from class_batch import ATTACKS, read_csv, run_cli

from bertcourse.grading.batch.autograde import RESULT_NAME, BatchOptions, autograde
from bertcourse.grading.batch.gradebook import open_gradebook

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def graded(class_batch):
    """The class batch (tests/support/class_batch.py), graded by the command with two lanes."""
    return class_batch


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


def test_a_killed_batch_resumes_without_regrading(graded, tmp_path):
    """Another class of the released course of `graded`, kept apart (its submissions, results and gradebook under
    tmp_path): the resumed batch runs in this process, where the engine of the serial batch above is still warm."""
    course = graded["course"]
    submitted = tmp_path / "submitted"
    # 1 s per notebook keeps the batch busy while it is killed, well inside the 4 s cell limit of `graded`
    slow = with_cells(solution(course), {"q1": 'import time\ntime.sleep(1)\nanswer_q1 = "b"\n'})
    students = [f"s{i}" for i in range(3)]  # killed after the first: 1 or 2 finished, the rest still to grade
    for student in students:
        submit(submitted, student, slow)

    proc = run_cli(course, str(submitted), "--jobs", "1")
    results = tmp_path / "autograded"
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
    rows = read_csv(tmp_path / "grades.csv")
    assert [float(rows[(s, EXERCISE)]["score"]) for s in students] == [3.0] * len(students)
    with open_gradebook(f"sqlite:///{tmp_path}/gradebook.db") as gradebook:
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
