"""Small helpers every lesson and exercise notebook uses, so that none of them repeats set-up code."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROFILE_VARIABLE = "BERTCOURSE_PROFILE"


def pick_profile(default_cpu: str = "cpu") -> str:
    """The hardware profile a notebook runs with.

    $BERTCOURSE_PROFILE wins (CI sets it to `cpu-quick`); otherwise `gpu` where CUDA is available
    (Colab), else `cpu`. The name is checked against course.yml so a typo fails at the top of the
    notebook rather than half-way through a training run.
    """
    from bertcourse.course import load_course

    name = os.environ.get(PROFILE_VARIABLE)
    if not name:
        import torch

        name = "gpu" if torch.cuda.is_available() else default_cpu
    load_course().profile(name)
    print(f"bertcourse profile: {name}")
    return name


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


def contents_table() -> str:
    """The README's table of lessons and exercises, generated from course.yml (tests keep them equal)."""
    from bertcourse.course import load_course

    course = load_course()
    rows = ["| # | notebook | what it teaches | open |", "|---|---|---|---|"]
    for number, lesson in enumerate(course.lessons):
        rows.append(f"| lesson {number} | [{lesson.title}]({lesson.notebook}) | {lesson.teaches} | "
                    f"{colab_badge(lesson.notebook)} |")
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
    restored, so a test or `bertcourse check` leaves the caller's environment as it found it. nbclient's
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
