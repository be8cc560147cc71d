"""Lesson notebooks committed with the outputs of a real run, and a record that keeps them in step with the code.

A lesson read on GitHub, or in Colab before Run All, shows nothing unless its outputs are committed. Outputs
are only worth committing if a reader can trust they came from the code next to them, so `execute_lessons`
writes, with the outputs:

- in the notebook's metadata (`bertcourse.provenance`): the profile, the data used, the package's git
  commit, the date, the wall time of the run, and a digest of each package module the lesson's code reaches
  (`authoring.package_code`);
- in every code cell's metadata (`bertcourse.source_sha256`): a hash of the source that produced its outputs.

`stale_cells` compares the two and `package_code.changed_modules` the digests; tests/notebooks/test_notebooks.py
fails on any lesson whose code, or the package code it imports, changed after its outputs were made
(regenerate with `bertcourse execute-lessons`, docs/developing.md "Lesson outputs").
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any

from bertcourse.authoring.package_code import code_digests, notebook_code, reached_modules
from bertcourse.errors import BertcourseError
from bertcourse.folders import package_commit

KEY = "bertcourse"
# Run in the kernel before the lesson's first cell, never by library code: figures as PNG at 72 dpi keep a
# committed lesson small (a 11 x 4 inch figure is ~800 x 290 pixels). Not stored in the notebook.
KERNEL_PRELUDE = (
    "import matplotlib\n"
    "matplotlib.rcParams.update({'figure.dpi': 72, 'savefig.dpi': 72})\n"
    "%config InlineBackend.figure_formats = ['png']\n"
)


def source_hash(source: str) -> str:
    """The hash recorded with a code cell's outputs (sha256 of its source, the first 16 hex digits)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def provenance(notebook: Any) -> dict | None:
    """The run that made `notebook`'s outputs, or None for a notebook committed without outputs."""
    return notebook.metadata.get(KEY, {}).get("provenance")


def has_outputs(notebook: Any) -> bool:
    """Whether any code cell of `notebook` was executed (outputs or an execution count)."""
    return any(cell.get("outputs") or cell.get("execution_count") is not None
               for cell in notebook.cells if cell.cell_type == "code")


def stale_cells(notebook: Any) -> list[int]:
    """Indices of the code cells whose source is not the one their recorded outputs came from.

    Strict for a notebook with provenance: every code cell must carry the hash of its current source, outputs
    or not (a cell edited to print nothing still changes what the cells after it print). A notebook without
    provenance must have no outputs at all: each of its code cells with outputs is stale.
    """
    if provenance(notebook) is None:
        return [i for i, cell in enumerate(notebook.cells)
                if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)]
    return [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
            and cell.metadata.get(KEY, {}).get("source_sha256") != source_hash(cell.source)]


def data_source(data_dir: str | None) -> str:
    """What the lessons read: the local folder's data sets by name (not the machine's path), or the hub."""
    if not data_dir:
        return "hub (datasets.load_dataset; no local folder given)"
    folder = Path(data_dir)
    if not folder.is_dir():
        raise BertcourseError(f"data folder {folder} does not exist (--data-dir / $BERTCOURSE_DATA)")
    names = sorted(p.name for p in folder.iterdir() if p.is_dir())
    return "local copy: " + ", ".join(names)


def clear_outputs(notebook: Any) -> None:
    """Remove outputs, execution counts and the records of `execute_notebook_outputs` (back to as-authored)."""
    notebook.metadata.pop(KEY, None)
    for cell in notebook.cells:
        cell.metadata.pop(KEY, None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def clean_outputs(notebook: Any, root: Path, runs: Path | None = None, data_dir: str | Path | None = None) -> int:
    """Make committed outputs readable anywhere: the executing machine's paths of the course root, the runs
    folder and the data folder written relative to them (`runs/...`, `$BERTCOURSE_DATA`), ANSI escapes removed,
    and progress widgets (frozen on GitHub and on the course website) dropped. Returns how many outputs
    changed; the results are untouched."""
    places = [(str(Path(root).resolve()) + "/", "")]
    if runs is not None:
        places.insert(0, (str(Path(runs).resolve()) + "/", "runs/"))
    if data_dir:
        places.insert(0, (str(Path(data_dir).resolve()), "$BERTCOURSE_DATA"))
    changed = 0

    def clean(text: str) -> str:
        text = ANSI_ESCAPE.sub("", text)
        for absolute, relative in places:
            text = text.replace(absolute, relative)
        return text

    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            before = repr(output)
            data = output.get("data", {})
            if WIDGET_MIME in data:
                changed += 1
                continue
            if "text" in output:
                output["text"] = clean("".join(output["text"]) if isinstance(output["text"], list) else output["text"])
            for mime in ("text/plain", "text/markdown", "text/html"):
                if mime in data:
                    value = data[mime]
                    data[mime] = clean("".join(value) if isinstance(value, list) else value)
            if "traceback" in output:
                output["traceback"] = [clean(line) for line in output["traceback"]]
            changed += repr(output) != before
            kept.append(output)
        cell["outputs"] = kept
    return changed


def execute_notebook_outputs(notebook: Any, folder: Path, *, profile: str, data_dir: str | None,
                             commit: str, timeout: float = 1800) -> float:
    """Run `notebook` top to bottom in `folder` on `profile` and record its provenance; returns the wall time.

    The kernel gets BERTCOURSE_PROFILE (and BERTCOURSE_DATA when given) and runs KERNEL_PRELUDE first. A
    failing cell raises nbclient's CellExecutionError and the notebook is left for the caller not to write.
    """
    import nbformat
    from nbclient import NotebookClient

    clear_outputs(notebook)
    package_code = code_digests(reached_modules(notebook_code(notebook)))  # the code that runs, read before it runs
    env = {"BERTCOURSE_PROFILE": profile, "BERTCOURSE_PROGRESS": "lines",
           **({"BERTCOURSE_DATA": data_dir} if data_dir else {})}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    started = time.monotonic()
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(folder)}})
    notebook.cells.insert(0, nbformat.v4.new_code_cell(KERNEL_PRELUDE))  # nbclient writes cells back by index
    try:
        with client.setup_kernel():
            client.execute_cell(notebook.cells[0], 0, store_history=False)
            for index, cell in enumerate(notebook.cells[1:], start=1):
                client.execute_cell(cell, index)
    finally:
        del notebook.cells[0]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    wall = time.monotonic() - started
    from bertcourse.course import find_root
    from bertcourse.run_folders import runs_dir

    clean_outputs(notebook, find_root(), runs_dir(), data_dir)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.metadata[KEY] = {"source_sha256": source_hash(cell.source)}
    notebook.metadata[KEY] = {"provenance": {
        "profile": profile,
        "data": data_source(data_dir),
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_time_s": round(wall),
        "package_code": package_code,
    }}
    return wall


def execute_lessons(names: list[str] | None = None, profile: str = "cpu", data_dir: str | None = None,
                    timeout: float = 1800, clear: bool = False) -> list[tuple[str, float]]:
    """Execute the lessons named (ids or notebook paths; default: all, in course.yml's order) and write them
    back with their outputs and provenance, or with `clear`, strip them back to no outputs.

    Lessons run in order because later ones reuse what earlier ones trained (runs/). Returns (notebook,
    seconds) per lesson. A lesson that fails is not written, and the error names it.
    """
    import nbformat

    from bertcourse.course import load_course

    course = load_course()
    course.profile(profile)  # an unknown profile fails here, with the ones there are
    lessons = course.lessons
    if names:
        wanted = set(names)
        lessons = [lesson for lesson in lessons if lesson.id in wanted or lesson.notebook in wanted]
        unknown = wanted - {lesson.id for lesson in lessons} - {lesson.notebook for lesson in lessons}
        if unknown:
            raise BertcourseError(f"no lesson {sorted(unknown)} in course.yml; lessons: "
                                  + ", ".join(lesson.id for lesson in course.lessons))
    data_dir = data_dir or os.environ.get("BERTCOURSE_DATA")
    commit = package_commit(course.root)
    done = []
    for lesson in lessons:
        path = course.root / lesson.notebook
        notebook = nbformat.read(path, as_version=4)
        if clear:
            clear_outputs(notebook)
            nbformat.write(notebook, path)
            done.append((lesson.notebook, 0.0))
            continue
        try:
            wall = execute_notebook_outputs(notebook, path.parent, profile=profile, data_dir=data_dir,
                                            commit=commit, timeout=timeout)
        except Exception as exc:  # nbclient's errors carry the cell and its traceback
            raise BertcourseError(f"{lesson.notebook} failed on profile {profile}; not written:\n{exc}") from exc
        nbformat.write(notebook, path)
        print(f"{lesson.notebook}: executed on {profile} in {wall / 60:.1f} min", flush=True)
        done.append((lesson.notebook, wall))
    keep_measured_table(course.root, profile)
    return done


def keep_measured_table(root: Path, profile: str) -> Path | None:
    """Copy the headline experiment's results.json of `profile` (results/ is not committed) to
    benchmarks/results/sst2-PROFILE/, where lesson 4 finds the measured table when it runs on another profile.
    It is read from the runs folder (`run_folders.results_folder`), else from the course root's results/
    (where lesson 4 wrote it before)."""
    import shutil

    from bertcourse.run_folders import results_folder, runs_dir

    places = [results_folder("sst2", profile, runs=runs_dir(root)) / "results.json",
              root / "results" / f"sst2-{profile}" / "results.json"]
    made = next((path for path in places if path.is_file()), None)
    if made is None:
        return None
    kept = root / "benchmarks" / "results" / f"sst2-{profile}" / "results.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(made, kept)
    return kept


def execute_lessons_command(args: argparse.Namespace) -> int:
    """`bertcourse execute-lessons`: execute the named lessons (all by default) and keep their outputs."""
    execute_lessons(args.lessons or None, profile=args.profile, data_dir=args.data_dir,
                    timeout=args.timeout, clear=args.clear)
    return 0
