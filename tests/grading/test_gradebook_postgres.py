"""A course team's shared gradebook: `autograde --db-url postgresql://...` records every grade in a real
PostgreSQL server (started on a private Unix socket, no network: the `postgres_url` fixture, conftest.py)."""

from __future__ import annotations

import pytest
from batch_support import EXERCISE, make_course, solution, submit, with_cells

from bertcourse.grading.batch.autograde import BatchOptions, autograde
from bertcourse.grading.batch.gradebook import open_gradebook


@pytest.mark.slow
def test_autograde_records_grades_in_postgresql(tmp_path, postgres_url):
    course = make_course(tmp_path / "course")
    submitted = course.root / "submitted"
    right = solution(course)
    submit(submitted, "alice", right)
    submit(submitted, "carol", with_cells(right, {"add": "def add(a, b):\n    return a - b\n"}))
    summary = autograde(course, BatchOptions(submitted, db_url=postgres_url, jobs=2, progress=False),
                        log=lambda _: None)
    assert summary.db_url == postgres_url
    with open_gradebook(postgres_url) as gradebook:
        assert gradebook.find_submission(EXERCISE, "alice").score == pytest.approx(3)
        assert gradebook.find_submission(EXERCISE, "carol").score == pytest.approx(1)
        assert gradebook.find_grade("add_checks", "add", EXERCISE, "carol").auto_score == 0
        assert sorted(s.id for s in gradebook.students) == ["alice", "carol"]
