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
    from nbclient import NotebookClient

    path = ROOT / relative
    notebook = nbformat.read(path, as_version=4)
    saved = {k: os.environ.get(k) for k in ("BERTCOURSE_PROFILE", "BERTCOURSE_DATA")}
    os.environ.update(BERTCOURSE_PROFILE=os.environ.get("BERTCOURSE_PROFILE") or "cpu-quick",
                      BERTCOURSE_DATA=str(data_dir))
    try:
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return notebook


def printed_text(notebook: nbformat.NotebookNode) -> str:
    """Everything the notebook's code cells printed."""
    return "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.outputs if output.output_type == "stream")
