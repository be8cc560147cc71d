"""Every lesson in course.yml runs top to bottom with the quick profile on the real data, and its
plots and progress bars do not break a headless run. (Notebooks are executed once, here.)"""

import os
from pathlib import Path

import nbformat
import pytest

from bertcourse.course import load_course

ROOT = Path(__file__).resolve().parents[1]
LESSONS = load_course(ROOT).lessons


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.id for lesson in LESSONS])
def test_lesson_executes(lesson, data_dir, monkeypatch):
    import nbclient

    monkeypatch.setenv("BERTCOURSE_PROFILE", os.environ.get("BERTCOURSE_PROFILE", "cpu-quick"))
    monkeypatch.setenv("BERTCOURSE_DATA", str(data_dir))
    path = ROOT / lesson.notebook
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert any("image/png" in o.get("data", {}) for cell in notebook.cells for o in cell.get("outputs", [])), (
        f"{lesson.notebook} shows no plot"
    )
