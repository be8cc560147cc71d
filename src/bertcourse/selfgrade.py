"""Grade the notebook you are working in from a cell in it, so that a student never needs a terminal.

The last cell of every exercise runs `grade_this_notebook("ex01-masking")`. It finds the notebook the
kernel belongs to (JupyterLab/Notebook: the Jupyter server's session for this kernel, else the
`__session__` path ipykernel sets; Colab: the live notebook, unsaved edits included), grades it in a
separate process with `bertcourse grade --json` (the same engine and hidden checks as in a terminal),
reads the result it writes, and shows the same report under the cell, saying which version of the
notebook was graded.

While the autograder runs the notebook (nbgrader sets NBGRADER_EXECUTION) it returns at once: a
notebook being graded never grades itself.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertcourse.errors import BertcourseError

GRADING_VARIABLE = "NBGRADER_EXECUTION"  # set by the autograder's worker (and nbgrader) while a notebook is graded
INSTEAD = ("Grade it from a terminal instead: `bertcourse grade PATH/TO/NOTEBOOK.ipynb` in the course folder, "
           "or name the file here: grade_this_notebook(notebook=\"PATH/TO/NOTEBOOK.ipynb\").")


class SelfGradeError(BertcourseError):
    """The notebook or the course could not be found: says what to do instead."""


@dataclass
class SelfGrade:
    """What `grade_this_notebook` shows: the report of `bertcourse grade`, or why there is none."""

    ok: bool  # grading ran (whatever the score)
    text: str  # the report, exactly as `bertcourse grade` prints it (or the reason grading did not run)
    graded: str = ""  # which version of which notebook was graded, in words
    warnings: list[str] = field(default_factory=list)
    result: Any = None  # the NotebookResult `bertcourse grade --json` wrote; None when grading did not run

    @property
    def score(self) -> tuple[float, float] | None:
        """(points, out of); None when grading did not run."""
        return None if self.result is None else (self.result.score, self.result.max_score)

    def __str__(self) -> str:
        head = [f"graded: {self.graded}"] if self.graded else []
        head += [f"warning: {w}" for w in self.warnings]
        return "\n".join([*head, self.text])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.ok and self.score and self.score[0] == self.score[1] else "#444"
        parts = ['<div class="bertcourse-self-grade">']
        if self.score:
            parts.append(f'<p style="font-size:1.2em;color:{colour}"><b>score: {self.score[0]:g}/{self.score[1]:g}'
                         "</b></p>")
        elif not self.ok:
            parts.append('<p style="color:#b00020"><b>Could not grade this notebook</b></p>')
        if self.graded:
            parts.append(f"<p>graded: {html.escape(self.graded)}</p>")
        parts += [f'<p style="color:#9a6700">warning: {html.escape(w)}</p>' for w in self.warnings]
        parts.append(f'<pre style="white-space:pre-wrap">{html.escape(self.text)}</pre></div>')
        return "".join(parts)


def grade_this_notebook(exercise: str | None = None,
                        notebook: str | os.PathLike[str] | None = None) -> SelfGrade | None:
    """Grade this notebook with the exercise's hidden checks and return the report (Jupyter shows it).

    `exercise` is the id from course.yml (default: inferred as `bertcourse grade` does); `notebook` a
    file to grade instead of the one this kernel belongs to. Returns None, doing nothing, while the
    notebook itself is being autograded.
    """
    if os.environ.get(GRADING_VARIABLE):
        return None
    try:
        with _notebook_to_grade(notebook) as (path, graded, warnings):
            root = find_course_root(path)
            title = exercise_title(root, exercise)  # a misspelt id is said before anything is graded
            print(f"Grading {path.name} with the hidden checks of the course in {root} ...", flush=True)
            code, result, text = run_grade(path, exercise, root)
    except SelfGradeError as exc:
        return SelfGrade(ok=False, text=str(exc))
    if result is None:  # grading did not run: nothing was graded, whatever the file was
        return SelfGrade(False, text)
    from bertcourse.grading.report import format_result

    report = format_result(result, title or exercise_title(root, result.exercise))
    return SelfGrade(code == 0, "\n".join(p for p in (report, text) if p), graded, warnings, result)


def exercise_title(root: Path, exercise: str | None) -> str:
    """The exercise's title in the course at `root` ("" for None); SelfGradeError for an unknown id."""
    if exercise is None:
        return ""
    from bertcourse.course import load_course
    from bertcourse.errors import BertcourseError

    try:
        return load_course(root, check_files=False).exercise(exercise).title
    except BertcourseError as exc:
        raise SelfGradeError(str(exc)) from None


def run_grade(path: Path, exercise: str | None, root: Path) -> tuple[int, Any, str]:
    """`bertcourse grade --json PATH` in a separate process (never in the kernel, which runs student code):
    its exit status, the NotebookResult it wrote (None when it wrote none) and what else it said (errors)."""
    from bertcourse.grading.results import NotebookResult

    command = [sys.executable, "-m", "bertcourse.cli", "grade", str(path), "--json"]
    if exercise:
        command += ["--exercise", exercise]
    env = {**os.environ, "BERTCOURSE_ROOT": str(root)}
    env.pop(GRADING_VARIABLE, None)
    done = subprocess.run(command, cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    try:
        result = NotebookResult.from_dict(json.loads(done.stdout))
    except (ValueError, TypeError, KeyError):  # no result: the command said why on stderr
        return done.returncode, None, "\n".join(p.strip() for p in (done.stdout, done.stderr) if p.strip())
    return done.returncode, result, done.stderr.strip()


# ----------------------------------------------------------------------------- which notebook


@contextlib.contextmanager
def _notebook_to_grade(notebook: str | os.PathLike[str] | None) -> Iterator[tuple[Path, str, list[str]]]:
    """(file to grade, which version it is in words, warnings); a Colab snapshot lives only meanwhile."""
    if notebook is not None:
        path = Path(notebook).expanduser().resolve()
        if not path.is_file():
            raise SelfGradeError(f"{path}: no such file. {INSTEAD}")
        yield path, _saved_version(path), []
    elif "google.colab" in sys.modules:
        with tempfile.TemporaryDirectory(prefix="bertcourse-colab-") as folder:
            path = colab_snapshot(Path(folder))
            yield path, f"the notebook as it is now in Colab, unsaved edits included ({time.strftime('%H:%M:%S')})", []
    else:
        path = locate_notebook()
        shell = _shell()
        warning = _unsaved_warning(path, shell) if shell is not None else None
        yield path, _saved_version(path), [warning] if warning else []


def locate_notebook() -> Path:
    """The notebook file this kernel runs: the Jupyter server's session for this kernel (right even
    after a rename), else the path the server gave the kernel at start (`__session__`)."""
    kernel = kernel_id()
    candidates = [session_path(kernel)] if kernel else []
    shell = _shell()
    names = [getattr(shell, "user_ns", {}).get(name) for name in ("__session__", "__vsc_ipynb_file__")]
    names.append(os.environ.get("JPY_SESSION_NAME"))
    candidates += [_existing(name) for name in names if isinstance(name, str) and name]
    for path in candidates:
        if path is not None:
            return path
    raise SelfGradeError(
        "Could not tell which notebook this kernel belongs to (no Jupyter server session for it, and not "
        f"Colab). {INSTEAD}")


def kernel_id() -> str | None:
    """This kernel's id, from its connection file `kernel-<id>.json`; None outside a Jupyter kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:  # not in an ipykernel (plain Python, a test): no id
        return None
    match = re.fullmatch(r"kernel-(.+)\.json", name)
    return match.group(1) if match else None


def session_path(kernel: str) -> Path | None:
    """The notebook of the session holding `kernel`, asked of each Jupyter server running on this
    machine (their `jpserver-*.json` files in the runtime folder give address and token)."""
    from jupyter_core.paths import jupyter_runtime_dir

    for info_file in sorted(Path(jupyter_runtime_dir()).glob("jpserver-*.json")):
        try:
            info = json.loads(info_file.read_text(encoding="utf-8"))
            request = urllib.request.Request(info["url"].rstrip("/") + "/api/sessions",
                                             headers={"Authorization": f"token {info.get('token', '')}"})
            with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - a local Jupyter server
                sessions = json.loads(answer.read())
        except Exception:  # a stale file, a server gone or password-protected: try the next one
            continue
        for session in sessions if isinstance(sessions, list) else []:
            if (session.get("kernel") or {}).get("id") == kernel:
                relative = session.get("path") or (session.get("notebook") or {}).get("path") or ""
                path = Path(info.get("root_dir") or info.get("notebook_dir") or ".").expanduser() / relative
                if path.suffix == ".ipynb" and path.is_file():
                    return path.resolve()
    return None


def colab_snapshot(folder: Path) -> Path:
    """Write the live Colab notebook (what the browser shows, unsaved edits included) into `folder`."""
    from google.colab import _message  # type: ignore[import-not-found]

    answer = _message.blocking_request("get_ipynb", request="", timeout_sec=60)
    content = answer.get("ipynb") if isinstance(answer, dict) else None
    if not isinstance(content, dict):
        raise SelfGradeError("Colab did not hand over the notebook. Download it (File > Download > Download "
                             f".ipynb) and grade the file. {INSTEAD}")
    name = str((content.get("metadata") or {}).get("colab", {}).get("name") or "")
    name = Path(name).name if re.fullmatch(r"[\w.() -]+\.ipynb", Path(name).name) else "notebook.ipynb"
    path = folder / name
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


def _existing(name: str) -> Path | None:
    """`name` as a notebook file: absolute, or relative to the kernel's folder (the notebook's own)."""
    path = Path(name).expanduser()
    for candidate in (path, Path.cwd() / path, Path.cwd() / path.name):
        if candidate.suffix == ".ipynb" and candidate.is_file():
            return candidate.resolve()
    return None


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _saved_version(path: Path) -> str:
    saved = path.stat().st_mtime
    ago = max(0, int(time.time() - saved))
    when = (f"{ago} seconds ago" if ago < 120 else f"{ago // 60} minutes ago" if ago < 7200
            else f"{ago // 3600} hours ago")
    return f"{path} as saved at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(saved))} ({when})"


def _unsaved_warning(path: Path, shell: Any) -> str | None:
    """A warning when the code the kernel ran last (before this cell) is not in the saved file: the
    student probably edited the notebook and did not save it, so the grade is for an older version."""
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or []
    earlier = [source.strip() for source in history[:-1] if source and source.strip()]
    if not earlier:
        return None
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        saved = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(earlier[-1] in source for source in saved):
        return None
    return ("the code you ran last is not in the saved file, so this grade may be for an older version: "
            "save the notebook (Ctrl+S / Cmd+S) and run this cell again.")


# ----------------------------------------------------------------------------- which course


def find_course_root(notebook: Path | None = None) -> Path:
    """The course checkout holding course.yml and the hidden checks: $BERTCOURSE_ROOT (set by the Colab
    set-up cell), else a folder above the notebook, else the checkout the package is installed from,
    else a folder above the working directory."""
    from bertcourse.course import MANIFEST_NAME, CourseError, find_root

    if os.environ.get("BERTCOURSE_ROOT"):
        try:
            return find_root()
        except CourseError as exc:
            raise SelfGradeError(f"{exc}. {INSTEAD}") from exc
    package_checkout = Path(__file__).resolve().parents[2]
    starts = [notebook.parent] if notebook is not None else []
    for start in (*starts, package_checkout, Path.cwd()):
        with contextlib.suppress(CourseError):
            return find_root(start)
    raise SelfGradeError(
        f"Could not find the course folder (the one holding {MANIFEST_NAME} and autograder/, where the hidden "
        "checks live). Set BERTCOURSE_ROOT to it, e.g. os.environ[\"BERTCOURSE_ROOT\"] = \"/path/to/bertcourse\", "
        "and run this cell again.")
