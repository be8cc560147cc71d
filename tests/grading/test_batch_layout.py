"""What `bertcourse autograde` refuses before grading anything, and where its class's grades go: a wrong
layout exits 2 naming what it found, each class keeps its own gradebook, every submission has a time,
feedback pages are readable unless asked otherwise. Nothing here starts the engine."""

from __future__ import annotations

import json
import os
import stat

import pytest
from batch_support import EXERCISE, NOTEBOOK, make_course, solution, submit

from bertcourse import cli
from bertcourse.grading.batch.gradebook import class_db_url
from bertcourse.grading.batch.layout import BatchError, find_submissions, submission_timestamp


@pytest.fixture
def course(tmp_path, monkeypatch):
    course = make_course(tmp_path / "course")
    monkeypatch.setenv("BERTCOURSE_ROOT", str(course.root))
    monkeypatch.delenv("BERTCOURSE_DB_URL", raising=False)
    monkeypatch.chdir(course.root)
    return course


def _autograde_refuses(folder, capsys) -> str:
    assert cli.main(["autograde", str(folder), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "graded now" not in captured.out  # refused before any grading or writing
    return captured.err


def test_an_empty_class_is_refused_with_the_layout_expected(course, capsys, tmp_path):
    (course.root / "submitted").mkdir()
    err = _autograde_refuses(course.root / "submitted", capsys)
    assert "holds no submission to grade" in err and "<student>/<exercise id>/<notebook>.ipynb" in err
    assert "it is empty" in err and EXERCISE in err
    assert not (course.root / "grades.csv").exists() and not (course.root / "gradebook.db").exists()


def test_notebooks_right_in_the_students_folders_are_named(course, capsys):
    submitted = course.root / "submitted"
    for student in ("alice", "bob"):
        (submitted / student).mkdir(parents=True)
        (submitted / student / NOTEBOOK).write_text(json.dumps(solution(course)))
    err = _autograde_refuses(submitted, capsys)
    assert f"alice/{NOTEBOOK} lies right in the student's folder; it belongs in alice/<exercise id>/" in err
    assert f"bob/{NOTEBOOK}" in err


def test_a_release_folder_given_by_mistake_is_named(course, capsys):
    release = course.root / "release"
    (release / EXERCISE).mkdir(parents=True)
    (release / EXERCISE / NOTEBOOK).write_text(json.dumps(solution(course)))
    err = _autograde_refuses(release, capsys)
    assert f"{EXERCISE}/ is an exercise folder, not a student's (it holds {NOTEBOOK})" in err


def test_a_filter_that_leaves_nothing_is_refused(course):
    submit(course.root / "submitted", "alice", solution(course))
    (course.root / "submitted" / "alice" / "other").mkdir()
    assert [job.label for job in find_submissions(course, course.root / "submitted")] == [
        f"alice/{EXERCISE}", "alice/other"]
    with pytest.raises(BatchError, match="holds no submission"):
        find_submissions(course, course.root / "submitted" / "alice")  # one level too deep


def test_each_class_keeps_its_own_gradebook_unless_one_is_named(course, tmp_path, monkeypatch):
    assert class_db_url(course, tmp_path / "class-a") == f"sqlite:///{tmp_path / 'class-a'}/gradebook.db"
    assert class_db_url(course, course.root) == f"sqlite:///{course.root}/gradebook.db"  # nbgrader's own place
    monkeypatch.setenv("BERTCOURSE_DB_URL", f"sqlite:///{tmp_path}/team.db")
    assert class_db_url(course, tmp_path / "class-a") == f"sqlite:///{tmp_path}/team.db"


def test_the_submission_time_is_nbgraders_else_the_files(course):
    path = submit(course.root / "submitted", "alice", solution(course))
    os.utime(path, (1_700_000_000, 1_700_000_000))
    assert submission_timestamp(path.parent, path) == "2023-11-14T22:13:20+00:00"
    (path.parent / "timestamp.txt").write_text("2024-03-01 09:30:00.000000 UTC\n")
    assert submission_timestamp(path.parent, path) == "2024-03-01 09:30:00.000000 UTC"
    (path.parent / "timestamp.txt").write_text("not a time\n")
    assert submission_timestamp(path.parent, path) == "2023-11-14T22:13:20+00:00"
    (job,) = find_submissions(course, course.root / "submitted")
    assert job.submitted_at == "2023-11-14T22:13:20+00:00"


def test_feedback_pages_are_readable_unless_asked_otherwise(tmp_path):
    from bertcourse.grading.batch.feedback import write_feedback
    from bertcourse.grading.batch.records import Record
    from bertcourse.grading.results import NotebookResult

    record = Record(student="zoe", exercise=EXERCISE, notebook="add", submission="", key="", status="missing",
                    score=0.0, max_score=3.0, parts={}, part_max={}, reasons=["no notebook submitted"],
                    result=NotebookResult(notebook="", exercise=EXERCISE))
    shared = write_feedback(tmp_path / "shared", record, None)
    private = write_feedback(tmp_path / "private", record, None, mode=0o600)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
