"""Fixtures shared by the grading tests."""

from __future__ import annotations

import pytest
from class_batch import grade_class


@pytest.fixture(scope="session")
def class_batch(tmp_path_factory):
    """The class of tests/support/class_batch.py graded once by `bertcourse autograde --jobs 2`; its tests only
    read what the batch wrote (test_autograde, test_feedback)."""
    return grade_class(tmp_path_factory.mktemp("batch") / "course")
