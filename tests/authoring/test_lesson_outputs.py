"""Lesson outputs with their provenance: what `bertcourse execute-lessons` records, and how a stale one is found."""

import nbformat
import pytest

from bertcourse.authoring.lesson_outputs import (
    KEY,
    clear_outputs,
    execute_notebook_outputs,
    source_hash,
    stale_cells,
)
from bertcourse.cli import main

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def recorded(*sources):
    """A notebook as execute_notebook_outputs leaves it, without running a kernel."""
    cells = [nbformat.v4.new_markdown_cell("# a lesson")]
    for index, source in enumerate(sources):
        cell = nbformat.v4.new_code_cell(source, execution_count=index + 1,
                                         outputs=[nbformat.v4.new_output("stream", text="1\n")])
        cell.metadata[KEY] = {"source_sha256": source_hash(source)}
        cells.append(cell)
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata[KEY] = {"provenance": {"profile": "cpu", "data": "local copy: sst2", "commit": "abc",
                                             "date": "2026-12-01 10:00 UTC", "wall_time_s": 5}}
    return notebook


def test_a_cell_edited_after_its_outputs_is_stale_and_an_untouched_one_is_not():
    notebook = recorded("print(1)", "x = 2")
    assert stale_cells(notebook) == []
    notebook.cells[2].source = "x = 3"
    assert stale_cells(notebook) == [2]
    notebook.cells.insert(1, nbformat.v4.new_code_cell("y = 1"))  # a new cell has no record: stale
    assert stale_cells(notebook) == [1, 3]


def test_without_provenance_any_output_is_stale_and_a_clean_notebook_is_not():
    notebook = recorded("print(1)")
    del notebook.metadata[KEY]
    assert stale_cells(notebook) == [1]
    clear_outputs(notebook)
    assert stale_cells(notebook) == [] and KEY not in notebook.cells[1].metadata


def test_execution_records_profile_commit_and_a_hash_per_cell_and_keeps_figures_small(tmp_path):
    code = ("import matplotlib.pyplot as plt\n"
            "import os\n"
            "print(os.environ['BERTCOURSE_PROFILE'])\n"
            "plt.figure(figsize=(4, 3)); plt.plot([0, 1]); plt.show()")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    wall = execute_notebook_outputs(notebook, tmp_path, profile="cpu-quick", data_dir=str(tmp_path),
                                    commit="abc123", timeout=120)
    record = notebook.metadata[KEY]["provenance"]
    assert record["profile"] == "cpu-quick" and record["commit"] == "abc123" and record["wall_time_s"] == round(wall)
    assert stale_cells(notebook) == []
    outputs = notebook.cells[0].outputs
    assert outputs[0]["text"] == "cpu-quick\n"
    image = next(o for o in outputs if "image/png" in o.get("data", {}))
    import base64
    import io

    from PIL import Image

    width, height = Image.open(io.BytesIO(base64.b64decode(image["data"]["image/png"]))).size
    assert width <= 4 * 72 + 10 and height <= 3 * 72 + 10  # 72 dpi, whatever the machine's default
    assert "execution" not in notebook.cells[0].metadata  # no timings: they would change at every run


def test_an_unknown_lesson_is_refused_by_name(capsys):
    assert main(["execute-lessons", "lesson99-nothing"]) == 2
    assert "no lesson ['lesson99-nothing'] in course.yml" in capsys.readouterr().err


@pytest.mark.parametrize("profile", ["cpu_quick"])
def test_an_unknown_profile_is_refused(profile, capsys):
    assert main(["execute-lessons", "--profile", profile]) == 2
    assert "unknown profile 'cpu_quick'" in capsys.readouterr().err


def test_the_measured_table_is_kept_in_benchmarks_results(tmp_path):
    from bertcourse.authoring.lesson_outputs import keep_measured_table

    assert keep_measured_table(tmp_path, "cpu") is None
    made = tmp_path / "results" / "sst2-cpu" / "results.json"
    made.parent.mkdir(parents=True)
    made.write_text('{"format": "x"}')
    kept = keep_measured_table(tmp_path, "cpu")
    assert kept == tmp_path / "benchmarks" / "results" / "sst2-cpu" / "results.json"
    assert kept.read_text() == '{"format": "x"}'
