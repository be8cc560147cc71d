"""Every lesson in course.yml runs top to bottom with the quick profile on the real data and shows at
least one plot. Lesson-specific tests read the same executed notebooks (tests/lesson_support.py)."""

import pytest
from lesson_support import ROOT, executed_lesson

from bertcourse.course import load_course

LESSONS = load_course(ROOT).lessons


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.id for lesson in LESSONS])
def test_lesson_executes_and_shows_a_plot(lesson, data_dir):
    notebook = executed_lesson(lesson.notebook, data_dir)
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{lesson.notebook} shows no plot"
