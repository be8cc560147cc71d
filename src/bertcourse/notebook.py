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
# The set-up cell's tags: `colab-setup` names it (`authoring.setup_cells` finds it again), `remove-cell` keeps it out
# of the course website (myst-nb drops such cells: the site is read, never run).
COLAB_SETUP_TAG = "colab-setup"
COLAB_SETUP_TAGS = (COLAB_SETUP_TAG, "remove-cell")

# The set-up cell, filled in by `setup_cell_source`: a Colab form (collapsed to its title) that clones the course
# and hands over to `bertcourse/colab.py` in the clone. The clone stays here because the course is not installed
# yet; `_git` raises with git's own output: a `!git` magic never raises, so a failed clone used to leave a cell
# that looked done. GIT_TERMINAL_PROMPT=0: a wrong or private address fails instead of waiting for a password.
_SETUP_TEMPLATE = """\
#@title Colab set-up: installs the course in this runtime (does nothing elsewhere) { display-mode: "form" }
@DRIVE_PARAM@# Generated from course.yml by `make setup-cells`; the install's steps: src/bertcourse/colab.py.
import os, subprocess, sys
if "google.colab" in sys.modules and "BERTCOURSE_ROOT" not in os.environ:
    import runpy, shutil
    _course, _url, _branch = @CLONE@, "https://github.com/@REPOSITORY@", @BRANCH@
    if not os.path.isfile(f"{_course}/course.yml"):  # not cloned yet, or a failed clone left a part
        shutil.rmtree(_course, ignore_errors=True)
        print(f"Downloading the course from {_url} ...")
        _git = subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", _branch, _url, _course],
                              capture_output=True, text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
        if _git.returncode != 0:
            raise RuntimeError(f"`git clone {_url}` (branch {_branch}) failed:\\n{_git.stderr.strip()}\\n\\n"
                               "Check that this runtime is online and that the repository and branch exist and "
                               "are public: they are `repository` and `branch` in the course's course.yml. "
                               "Run this cell again to retry.")
    runpy.run_path(f"{_course}/src/bertcourse/colab.py")["install"](_course)"""

_DRIVE_PARAM = """\
#@markdown Tick USE_DRIVE to keep runs and prepared data in your Google Drive for later sessions and lessons
#@markdown (Colab asks you first; elsewhere set BERTCOURSE_RUNS and BERTCOURSE_CACHE to any folder).
USE_DRIVE = False  #@param {type:"boolean"}
"""
_DRIVE_LINES = """
if USE_DRIVE:
    from bertcourse.notebook import use_drive
    use_drive()"""


def setup_cell_source(repository: str | None = None, branch: str | None = None, clone_dir: str = COLAB_CLONE,
                      drive: bool = False) -> str:
    """The source of every notebook's Colab set-up cell: in Colab, install the course into the live kernel.

    Short on purpose: a Colab form shows only its title, and the steps live in the package
    (`bertcourse.colab.install`), where they are tested. A failed clone or install raises with the command's
    output and what to do; BERTCOURSE_ROOT is set only after both succeeded, so running the cell again retries.
    `drive=True` (lessons) adds the opt-in to keep runs and caches in Google Drive (`use_drive`), a checkbox.
    """
    if repository is None or branch is None:
        from bertcourse.course import load_course

        info = load_course().course
        repository, branch = repository or info.repository, branch or info.branch
    source = (_SETUP_TEMPLATE.replace("@CLONE@", json.dumps(clone_dir)).replace("@REPOSITORY@", repository)
              .replace("@BRANCH@", json.dumps(branch)).replace("@DRIVE_PARAM@", _DRIVE_PARAM if drive else ""))
    return source + (_DRIVE_LINES if drive else "")


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


def contents_table(root: str | Path | None = None) -> str:
    """The table of lessons and exercises of the README and the website's start page, generated from course.yml
    (of the course at `root`, else the one found from here); tests keep the README's equal to it."""
    from bertcourse.course import load_course

    course = load_course(root)
    where = (course.course.repository, course.course.branch)
    rows = ["| # | notebook | what it teaches | open |", "|---|---|---|---|"]
    for lesson in course.lessons:
        rows.append(f"| lesson {lesson_number(lesson.notebook)} | [{lesson.title}]({lesson.notebook}) | "
                    f"{lesson.teaches} | {colab_badge(lesson.notebook, *where)} |")
    for exercise in course.exercises:
        path = f"exercises/{exercise.notebook}"
        minutes = f"~{exercise.expected_minutes} minutes, " if exercise.expected_minutes else ""
        rows.append(f"| exercise `{exercise.id}` | [{exercise.title}]({path}) | {exercise.points:g} points, "
                    f"{minutes}graded by `bertcourse grade` | {colab_badge(path, *where)} |")
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
