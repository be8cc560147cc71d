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
# What pip may add to a Colab runtime but never replace: the CUDA build of torch Colab ships, the kernel's
# own packages (a newer IPython or traitlets under a running kernel breaks it at the next restart; Colab pins
# IPython 7.34), and pyarrow, which pandas has usually imported already. pyarrow alone is let go when no
# `datasets` the course accepts works with it (`_SETUP_TEMPLATE`: the cell then asks for a restart).
COLAB_KEEP = ("torch", "ipython", "ipykernel", "traitlets", "jupyter-client")
COLAB_KEEP_IF_POSSIBLE = ("pyarrow",)

# The set-up block, filled in by `setup_cell_source`. No blank line (see there). `_run` raises with the
# command's own output: `!git` / `!pip` magics never raise, so a failed clone used to leave a cell that
# looked done and a kernel that could not import the course. BERTCOURSE_ROOT is set only after success,
# so running the cell again retries.
_SETUP_TEMPLATE = """\
# Colab: install the course into this runtime, no restart needed (does nothing elsewhere).
# Generated from course.yml by `make setup-cells`: edit that, not this block.
import os, sys
if "google.colab" in sys.modules and "BERTCOURSE_ROOT" not in os.environ:
    import importlib, importlib.metadata, pathlib, shutil, subprocess
    _course, _url, _branch = pathlib.Path(@CLONE@), "https://github.com/@REPOSITORY@", @BRANCH@
    def _run(command, fix):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip()[-3000:]
            raise RuntimeError(f"`{' '.join(command)}` failed (exit code {done.returncode}):\\n{said}\\n\\n{fix}")
    if not (_course / "course.yml").is_file():
        shutil.rmtree(_course, ignore_errors=True)  # what a failed or interrupted clone left
        _run(["git", "clone", "-q", "--depth", "1", "--branch", _branch, _url, str(_course)],
             f"Could not download the course: repository {_url}, branch {_branch}. Check that this runtime "
             "is online and that the repository and branch exist and are public. The address comes from "
             "`repository` and `branch` in the course's course.yml (the course's authors change it there and "
             "run `make setup-cells`); you may also edit _url and _branch above. Run this cell again to retry.")
    def _pins(names):  # name==version of each one installed
        found = {}
        for name in names:
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                pass
        return [f"{name}=={version}" for name, version in found.items()]
    _kept, _kept_if_possible = @KEEP@, @KEEP_IF_POSSIBLE@
    _before, _constraints = _pins(_kept_if_possible), _course.parent / "bertcourse-constraints.txt"
    _pip = [sys.executable, "-m", "pip", "install", "-q", "-c", str(_constraints), str(_course)]
    _constraints.write_text("\\n".join(_pins(_kept) + _before) + "\\n")
    if subprocess.run(_pip, capture_output=True, text=True).returncode != 0:
        _constraints.write_text("\\n".join(_pins(_kept)) + "\\n")  # maybe no datasets fits that pyarrow: let it go
        _run(_pip, f"pip could not install the course from {_course} (its output is above). Run this cell again "
                   "to retry; if it fails again, Runtime > Disconnect and delete runtime, then run it again.")
        _moved = [pin for pin in _before if pin not in _pins(_kept_if_possible)]
        if any(pin.partition("==")[0] in sys.modules for pin in _moved):
            print(f"pip replaced {', '.join(_moved)}, already loaded in this runtime: Runtime > Restart "
                  "session, then run this cell again (it only checks the install then).")
    importlib.invalidate_caches()
    os.environ["BERTCOURSE_ROOT"] = str(_course)"""

_DRIVE_LINES = """\
USE_DRIVE = False  # True: keep runs and prepared data in your Google Drive, for later sessions and lessons
if USE_DRIVE:  # Colab asks you first; elsewhere set BERTCOURSE_RUNS and BERTCOURSE_CACHE to any folder
    from bertcourse.notebook import use_drive
    use_drive()"""


def setup_cell_source(repository: str | None = None, branch: str | None = None, clone_dir: str = COLAB_CLONE,
                      drive: bool = False) -> str:
    """The block that opens every notebook's first code cell: in Colab, install the course into the live kernel.

    Why not `pip install -e`: an editable install is a `.pth` file, read only when Python starts, so the
    running kernel could not import the course until a restart. A regular install puts the package in
    site-packages, which the kernel already searches (`invalidate_caches` makes it look again). A constraints
    file pins what the runtime must keep (`COLAB_KEEP`): pip may add or upgrade other packages, never those.
    pip runs as `sys.executable -m pip`, the kernel's own interpreter. A failed clone or install raises with
    the command's output and what to do; BERTCOURSE_ROOT (which points the course at the clone: course.yml,
    the hidden checks) is set only after both succeeded, so running the cell again retries.
    `drive=True` (lessons) adds the opt-in to keep runs and caches in Google Drive (`use_drive`).
    The block has no blank line, so `write_setup_cells` can tell it from the notebook's own imports.
    """
    if repository is None or branch is None:
        from bertcourse.course import load_course

        info = load_course().course
        repository, branch = repository or info.repository, branch or info.branch
    block = (_SETUP_TEMPLATE.replace("@CLONE@", json.dumps(clone_dir)).replace("@REPOSITORY@", repository)
             .replace("@BRANCH@", json.dumps(branch)).replace("@KEEP@", repr(COLAB_KEEP))
             .replace("@KEEP_IF_POSSIBLE@", repr(COLAB_KEEP_IF_POSSIBLE)))
    return block + ("\n" + _DRIVE_LINES if drive else "")


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
    changed = []
    for folder in NOTEBOOK_FOLDERS:
        block = setup_cell_source(course.course.repository, course.course.branch, drive=folder == "lessons")
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


DRIVE_MOUNT = "/content/drive"
DRIVE_FOLDER = "MyDrive/bertcourse"  # under the mount point: runs/ and cache/ of every lesson


def keep_artefacts_in(folder: str | Path) -> dict[str, Path]:
    """Point this process's runs (`run_folders.RUNS_ENV`) and cache (`folders.CACHE_ENV`) at `folder`/runs and
    `folder`/cache, so a later session or another notebook finds lesson 3's pretraining and the prepared data
    there. Returns the two folders. Called by the student (or `use_drive`), never on import."""
    from bertcourse.folders import CACHE_ENV
    from bertcourse.run_folders import RUNS_ENV

    folder = Path(folder).expanduser()
    chosen = {RUNS_ENV: folder / "runs", CACHE_ENV: folder / "cache"}
    for variable, path in chosen.items():
        path.mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(path)
    print(f"runs in {chosen[RUNS_ENV]}, prepared data in {chosen[CACHE_ENV]}")
    return chosen


def use_drive(folder: str = DRIVE_FOLDER, mount_point: str = DRIVE_MOUNT) -> dict[str, Path]:
    """In Colab, mount the student's Google Drive (Colab asks them to allow it) and keep runs and the data
    cache in `mount_point`/`folder`: each Colab notebook runs on its own machine, which forgets everything when
    it is recycled, so without this lessons 4 and 6 redo lesson 3's pretraining and the data work.

    Only when the student asks (the set-up cell's `USE_DRIVE = True`). Outside Colab it raises: set
    BERTCOURSE_RUNS and BERTCOURSE_CACHE (or call `keep_artefacts_in`) to keep them anywhere else.
    """
    import sys

    if "google.colab" not in sys.modules:
        raise RuntimeError("use_drive() mounts Google Drive in Colab only; elsewhere set BERTCOURSE_RUNS and "
                           "BERTCOURSE_CACHE to a folder (or call keep_artefacts_in(folder))")
    from google.colab import drive  # type: ignore[import-not-found]

    drive.mount(mount_point)
    return keep_artefacts_in(Path(mount_point) / folder)


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
