"""The Colab set-up cell put in place (`authoring.setup_cells`): its own collapsed, tagged cell, and the lessons'
provenance carried across only where it was in step."""

from __future__ import annotations

import nbformat

from bertcourse.authoring.lesson_outputs import KEY, source_hash, stale_cells
from bertcourse.authoring.setup_cells import place_setup_cell
from bertcourse.notebook import COLAB_SETUP_TAGS, setup_cell_source

OLD_BLOCK = 'import os, sys\nif "google.colab" in sys.modules:\n    pass'
IMPORTS = "import torch\nPROFILE = 'cpu'"


def _executed(first_code: str, in_step: bool = True) -> nbformat.NotebookNode:
    """A lesson with provenance whose first code cell is `first_code`, its recorded hash in step or not."""
    cell = nbformat.v4.new_code_cell(first_code, execution_count=1,
                                     outputs=[nbformat.v4.new_output("stream", text="profile: cpu\n")])
    cell.metadata[KEY] = {"source_sha256": source_hash(first_code if in_step else "something else")}
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Lesson"), cell])
    notebook.metadata[KEY] = {"provenance": {"profile": "cpu"}}
    return notebook


def test_the_old_block_is_split_off_into_a_collapsed_tagged_cell_and_the_record_follows():
    source = setup_cell_source("owner/course", "main", drive=True)
    notebook = _executed(OLD_BLOCK + "\n\n" + IMPORTS)
    assert place_setup_cell(notebook, source)
    setup, imports = notebook.cells[1], notebook.cells[2]
    assert setup.source == source and setup.metadata["cellView"] == "form" and setup.id == "colab-setup"
    assert set(COLAB_SETUP_TAGS) <= set(setup.metadata["tags"]) and not setup.outputs
    assert imports.source == IMPORTS and imports.outputs[0]["text"] == "profile: cpu\n", "the outputs stay"
    assert stale_cells(notebook) == []
    assert not place_setup_cell(notebook, source), "a second run changes nothing"
    assert place_setup_cell(notebook, setup_cell_source("owner/course", "dev", drive=True))
    assert len(notebook.cells) == 3 and stale_cells(notebook) == [], "a new set-up source replaces the old"


def test_a_stale_cell_stays_stale_and_a_notebook_without_provenance_gets_no_record():
    notebook = _executed(OLD_BLOCK + "\n\n" + IMPORTS, in_step=False)
    place_setup_cell(notebook, setup_cell_source("owner/course", "main"))
    assert stale_cells(notebook) == [2], "the split must not launder outputs made from other code"
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(IMPORTS)])
    place_setup_cell(plain, setup_cell_source("owner/course", "main"))
    assert [c.source for c in plain.cells] == [setup_cell_source("owner/course", "main"), IMPORTS]
    assert KEY not in plain.cells[0].metadata
