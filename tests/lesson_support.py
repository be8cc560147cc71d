"""Executing lesson notebooks once per test session: several tests read the same executed lesson."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def executed_lesson(relative: str, data_dir: Path) -> nbformat.NotebookNode:
    """Run `relative` (a lesson path) top to bottom with the quick profile on the real data."""
    from bertcourse.notebook import execute_notebook

    path = ROOT / relative
    notebook = nbformat.read(path, as_version=4)
    profile = os.environ.get("BERTCOURSE_PROFILE") or "cpu-quick"
    execute_notebook(notebook, path.parent, 600, {"BERTCOURSE_PROFILE": profile, "BERTCOURSE_DATA": str(data_dir)})
    return notebook


def printed_text(notebook: nbformat.NotebookNode) -> str:
    """Everything the notebook's code cells printed."""
    return "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.outputs if output.output_type == "stream")
