"""Small helpers every lesson and exercise notebook uses, so that none of them repeats set-up code."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from bertcourse.course import LESSON_CPU_PROFILE, QUICK_PROFILE, resolve_profile


def pick_profile(name: str | None = None) -> str:
    """The hardware profile a lesson runs with, by the rule of every command (`course.resolve_profile`).

    `name` if given, else $BERTCOURSE_PROFILE (CI and the tests set `cpu-quick`), else `gpu` where CUDA is
    available (Colab), else `cpu`: a student who opens a lesson on a laptop without configuring anything
    gets runs whose results mean something (lesson 3 pretrains once, ~10 minutes on 2 cores; lessons 4
    and 6 reuse it), not `cpu-quick`'s seconds-long runs that only show the code works. Commands keep
    `cpu-quick` as their default. The name is checked against course.yml so a typo fails at the top of
    the notebook rather than half-way through a training run.
    """
    chosen = resolve_profile(name, cpu_default=LESSON_CPU_PROFILE)
    print(f"bertcourse profile: {chosen}" + ("" if chosen != QUICK_PROFILE else
          " (seconds-long runs that check the code, not results: the committed outputs are the cpu profile's)"))
    return chosen


def colab_url(path: str, repository: str | None = None, branch: str | None = None) -> str:
    """The Colab address that opens the notebook at `path` (relative to the course root) from GitHub."""
    if repository is None or branch is None:
        from bertcourse.course import load_course

        info = load_course().course
        repository, branch = repository or info.repository, branch or info.branch
    return f"https://colab.research.google.com/github/{repository}/blob/{branch}/{path}"


def colab_badge(path: str, repository: str | None = None, branch: str | None = None) -> str:
    """Markdown for an 'Open in Colab' badge; every notebook's first cell carries one."""
    image = "https://colab.research.google.com/assets/colab-badge.svg"
    return f"[![Open In Colab]({image})]({colab_url(path, repository, branch)})"


COLAB_CLONE = "/content/bertcourse"
NOTEBOOK_FOLDERS = ("lessons", "solutions")  # exercises/ is generated from solutions/ by `bertcourse release`


def setup_cell_source(repository: str | None = None, branch: str | None = None, clone_dir: str = COLAB_CLONE) -> str:
    """The block that opens every notebook's first code cell: in Colab, install the course into the live kernel.

    Why not `pip install -e`: an editable install is a `.pth` file, read only when Python starts, so the
    running kernel could not import the course until a restart. A regular install puts the package in
    site-packages, which the kernel already searches (`invalidate_caches` makes it look again). The
    constraint pins the torch that Colab ships (its CUDA build): pip may add or upgrade other packages but
    never replaces it. pip runs as `!{sys.executable} -m pip`, the kernel's own interpreter, rather than
    `%pip`, which ends with a note to restart the kernel that is not true here. BERTCOURSE_ROOT points the
    course at the clone (course.yml, the hidden checks).
    The block has no blank line, so `write_setup_cells` can tell it from the notebook's own imports.
    """
    if repository is None or branch is None:
        from bertcourse.course import load_course

        info = load_course().course
        repository, branch = repository or info.repository, branch or info.branch
    return "\n".join([
        "# Colab: install the course into this runtime, no restart needed (does nothing elsewhere).",
        "# Generated from course.yml by `make setup-cells`: edit that, not this block.",
        "import os, sys",
        'if "google.colab" in sys.modules and "BERTCOURSE_ROOT" not in os.environ:',
        "    import importlib, importlib.metadata, pathlib",
        f"    _course = pathlib.Path({json.dumps(clone_dir)})",
        '    if not (_course / "course.yml").is_file():',
        f"        !git clone -q --depth 1 --branch {branch} https://github.com/{repository} {{_course}}",
        '    _keep_torch = _course.parent / "bertcourse-keep-torch.txt"',
        "    _keep_torch.write_text(f\"torch=={importlib.metadata.version('torch')}\\n\")",
        "    !{sys.executable} -m pip install -q -c {_keep_torch} {_course}",
        "    importlib.invalidate_caches()",
        '    os.environ["BERTCOURSE_ROOT"] = str(_course)',
    ])


def _with_setup_block(source: str, block: str) -> str:
    """`source` (a first code cell) with its leading Colab block replaced by `block`, or `block` put first."""
    head, sep, rest = source.partition("\n\n")
    if "google.colab" in head:
        return block + sep + rest
    return block + ("\n\n" + source if source.strip() else "")


def write_setup_cells(root: str | Path | None = None) -> list[Path]:
    """Put `setup_cell_source()` at the top of the first code cell of every lesson and solution notebook.

    Returns the notebooks it changed. Run `bertcourse release` afterwards to carry the change to exercises/.
    """
    import nbformat

    from bertcourse.course import load_course
    from bertcourse.folders import content_files

    course = load_course(root)
    block = setup_cell_source(course.course.repository, course.course.branch)
    changed = []
    for folder in NOTEBOOK_FOLDERS:
        for path in content_files(course.root / folder, "*.ipynb"):
            notebook = nbformat.read(path, as_version=4)
            cell = next((c for c in notebook.cells if c.cell_type == "code"), None)
            if cell is None:
                raise ValueError(f"{path} has no code cell to hold the Colab set-up")
            source = _with_setup_block(cell.source, block)
            if source != cell.source:
                cell.source = source
                nbformat.write(notebook, path)
                changed.append(path)
    return changed


def lesson_number(notebook: str) -> int:
    """A lesson's number, from its file name's prefix (`lessons/05_evaluation_design.ipynb` -> 5).

    Not its position in course.yml: lessons land out of order (lesson 4 may come after lesson 5), and the
    number students see must stay the one the notebook itself carries.
    """
    match = re.match(r"(\d+)_", PurePosixPath(notebook).name)
    if match is None:
        raise ValueError(f"lesson notebook {notebook!r} has no number prefix such as '05_'")
    return int(match.group(1))


def contents_table() -> str:
    """The README's table of lessons and exercises, generated from course.yml (tests keep them equal)."""
    from bertcourse.course import load_course

    course = load_course()
    rows = ["| # | notebook | what it teaches | open |", "|---|---|---|---|"]
    for lesson in course.lessons:
        rows.append(f"| lesson {lesson_number(lesson.notebook)} | [{lesson.title}]({lesson.notebook}) | "
                    f"{lesson.teaches} | {colab_badge(lesson.notebook)} |")
    for exercise in course.exercises:
        path = f"exercises/{exercise.notebook}"
        rows.append(f"| exercise `{exercise.id}` | [{exercise.title}]({path}) | {exercise.points:g} points, "
                    f"graded by `bertcourse grade` | {colab_badge(path)} |")
    return "\n".join(rows)


def update_readme(path: str = "README.md") -> None:
    """Rewrite the README's table of contents from course.yml (`make readme`)."""
    from pathlib import Path

    from bertcourse.course import load_course

    readme = load_course().root / Path(path)
    text = readme.read_text()
    start = text.index("\n", text.index("<!-- course-contents")) + 1
    end = text.index("<!-- /course-contents -->")
    readme.write_text(text[:start] + contents_table() + "\n" + text[end:])


def execute_notebook(notebook: Any, folder: Path, timeout: float, env: Mapping[str, str]) -> None:
    """Run `notebook` (an nbformat node, filled with outputs in place) top to bottom in `folder`.

    `env` is set in this process only while the kernel starts and runs (the kernel inherits it), then
    restored, so a test or `bertcourse validate` leaves the caller's environment as it found it. nbclient's
    exceptions (CellExecutionError, CellTimeoutError) pass through for the caller to report.
    """
    from nbclient import NotebookClient

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
