"""Each exercise's expected time: course.yml's `expected_minutes`, written under the notebook's title by
`authoring.time_lines` (so the notebook, its release and the README's table cannot drift apart)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from bertcourse.authoring.time_lines import MARKER, place_time_line, read_time_line, time_line
from bertcourse.course import load_course

ROOT = Path(__file__).resolve().parents[2]
COURSE = load_course(ROOT)

TITLE = "# Exercise 1: masking\n\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](x)"


def test_every_exercise_has_an_expected_time():
    assert all(exercise.expected_minutes and exercise.expected_minutes > 0 for exercise in COURSE.exercises)


def test_the_line_goes_under_the_badge_once_and_is_replaced_in_place():
    exercise = COURSE.exercises[0]
    source = TITLE + "\n\nYou will write two functions."
    placed = place_time_line(source, time_line(exercise))
    paragraphs = placed.split("\n\n")
    assert paragraphs[2] == time_line(exercise) and paragraphs[3] == "You will write two functions."
    assert place_time_line(placed, time_line(exercise)) == placed  # a second run changes nothing
    moved = place_time_line(placed, f"{MARKER} about 5 minutes")
    assert moved.count(MARKER) == 1 and f"{MARKER} about 5 minutes" in moved


@pytest.mark.parametrize("exercise", COURSE.exercises, ids=lambda e: e.id)
@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_each_notebook_shows_course_ymls_expected_time(exercise, folder):
    notebook = nbformat.read(ROOT / folder / exercise.notebook, as_version=4)
    found = read_time_line(notebook)
    assert found == time_line(exercise), (
        f"{folder}/{exercise.notebook}: its time line is not course.yml's; run `make setup-cells`")
