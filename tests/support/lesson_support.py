"""Executing lesson notebooks once per test session: several tests read the same executed lesson.

Each lesson is run as a student runs it: Run All; then its drawing cells run again in the same kernel, as a
second Run All would run them (this catches anything the first run leaves behind in the kernel, such as a
matplotlib backend switched off, without training everything a second time).
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
PLOTTING = re.compile(r"\bplt\.|\bplot_\w+\(|\.imshow\(|\.subplots\(")


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """`env` in this process (the kernel inherits it) while the block runs, then restored."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@functools.cache
def _run_lesson(relative: str, data_dir: Path, runs: Path) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    """The lesson after Run All, and after its drawing cells ran again in the same kernel (quick profile, real
    data, the run folders in `runs`)."""
    from nbclient import NotebookClient

    path = ROOT / relative
    notebook = nbformat.read(path, as_version=4)
    profile = os.environ.get("BERTCOURSE_PROFILE") or "cpu-quick"
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    env = {"BERTCOURSE_PROFILE": profile, "BERTCOURSE_DATA": str(data_dir), "BERTCOURSE_RUNS": str(runs)}
    with _environment(env), client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
        first = copy.deepcopy(notebook)
        for index in plotting_cells(notebook):
            client.execute_cell(notebook.cells[index], index)
    return first, notebook


def executed_lesson(relative: str, data_dir: Path, runs: Path) -> nbformat.NotebookNode:
    """Run `relative` (a lesson path) top to bottom with the quick profile on the real data, its run folders in
    `runs` (the `lesson_runs` fixture)."""
    return _run_lesson(relative, data_dir, runs)[0]


def executed_again(relative: str, data_dir: Path, runs: Path) -> nbformat.NotebookNode:
    """The same lesson after its drawing cells ran a second time in the kernel of the first Run All."""
    return _run_lesson(relative, data_dir, runs)[1]


def plotting_cells(notebook: nbformat.NotebookNode) -> list[int]:
    """Indices of the code cells that draw a figure."""
    return [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code" and PLOTTING.search(cell.source)]


def shows_image(cell: nbformat.NotebookNode) -> bool:
    return any("image/png" in output.get("data", {}) for output in cell.get("outputs", []))


def printed_text(notebook: nbformat.NotebookNode) -> str:
    """Everything the notebook's code cells printed."""
    return "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.outputs if output.output_type == "stream")
