"""Every notebook's Colab set-up cell written from course.yml (`make setup-cells`): the cell's source is
`bertcourse.notebook.setup_cell_source`; this module puts it in place, collapsed and tagged, and keeps the
lessons' provenance records (`authoring.lesson_outputs`) in step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat

from bertcourse.authoring.lesson_outputs import KEY, source_hash
from bertcourse.course import load_course
from bertcourse.folders import content_files
from bertcourse.notebook import COLAB_SETUP_TAG, COLAB_SETUP_TAGS, setup_cell_source

NOTEBOOK_FOLDERS = ("lessons", "solutions")  # exercises/ is generated from solutions/ by `bertcourse release`


def _setup_metadata(cell: Any) -> None:
    """Mark `cell` as the set-up cell: collapsed to a form in Colab, tagged (`COLAB_SETUP_TAGS`)."""
    cell.metadata["cellView"] = "form"
    tags = cell.metadata.setdefault("tags", [])
    tags.extend(tag for tag in COLAB_SETUP_TAGS if tag not in tags)


def place_setup_cell(notebook: Any, source: str) -> bool:
    """Make the first code cell of `notebook` the set-up cell holding `source`; whether anything changed.

    The set-up cell is a cell of its own before the notebook's first code (its imports stay in sight, out of
    the collapsed form). An older notebook whose first code cell opens with the set-up block (the block, a
    blank line, the imports) is split in two. A notebook executed with provenance (`authoring.lesson_outputs`)
    keeps its record in step, because the set-up cell does nothing outside Colab, where lessons are executed:
    the set-up cell gets the hash of its source (it has no outputs), and a split cell that was in step gets the
    hash of its remaining code (its outputs came from that code); a cell that was stale stays stale.
    """
    index, cell = next(((i, c) for i, c in enumerate(notebook.cells) if c.cell_type == "code"), (None, None))
    if cell is None:
        raise ValueError("no code cell to put the Colab set-up before")
    before = nbformat.writes(notebook)
    executed = "provenance" in notebook.metadata.get(KEY, {})
    if COLAB_SETUP_TAG not in cell.metadata.get("tags", []):
        head, _, rest = cell.source.partition("\n\n")
        if "google.colab" in head:  # the older form: the block opened the cell
            record = cell.metadata.get(KEY, {})
            if executed and record.get("source_sha256") == source_hash(cell.source):
                record["source_sha256"] = source_hash(rest)
            cell.source = rest
        if cell.source.strip():
            cell = nbformat.v4.new_code_cell()
            cell["id"] = COLAB_SETUP_TAG  # not a random one: the notebook's diff stays the same at every run
            notebook.cells.insert(index, cell)
        else:  # only the block was there: that cell becomes the set-up cell
            cell.outputs, cell.execution_count = [], None
    cell.source = source
    _setup_metadata(cell)
    if executed:
        cell.metadata[KEY] = {"source_sha256": source_hash(source)}
    return nbformat.writes(notebook) != before


def write_setup_cells(root: str | Path | None = None) -> list[Path]:
    """Put `setup_cell_source()` in a set-up cell before the first code of every lesson and solution notebook.

    Returns the notebooks it changed. Run `bertcourse release` afterwards to carry the change to exercises/.
    """
    course = load_course(root)
    changed = []
    for folder in NOTEBOOK_FOLDERS:
        source = setup_cell_source(course.course.repository, course.course.branch, drive=folder == "lessons")
        for path in content_files(course.root / folder, "*.ipynb"):
            notebook = nbformat.read(path, as_version=4)
            try:
                moved = place_setup_cell(notebook, source)
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from exc
            if moved:
                nbformat.write(notebook, path)
                changed.append(path)
    return changed
