"""Where the course keeps its runs and what it calls each one: the one place run folders are named.

A lesson finds what another lesson or a command wrote only if both name the folder the same way: lesson 3's
pretraining is the folder `bertcourse pretrain`, `bertcourse compare` and lessons 4 and 6 look for
(`pretraining_folder`). Everything sits under `runs_dir()`: $BERTCOURSE_RUNS when set (any folder, e.g. one
in Google Drive that outlives a Colab runtime: `bertcourse.notebook.use_drive`), else the course root's
`runs/` (git ignores it).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

RUNS_ENV = "BERTCOURSE_RUNS"


def runs_dir(course: Any = None) -> Path:
    """$BERTCOURSE_RUNS, else `runs/` in the course root (`course.root`, `course` itself when it is a path, or
    the one `find_root` finds), else `runs/` in the working folder where no course root is found."""
    if os.environ.get(RUNS_ENV):
        return Path(os.environ[RUNS_ENV]).expanduser()
    if course is not None:
        return Path(course if isinstance(course, str | Path) else course.root) / "runs"
    from bertcourse.course import CourseError, find_root

    try:
        return find_root() / "runs"
    except CourseError:
        return Path("runs")


def run_folder(name: str, profile: str, *, tag: str = "", runs: str | Path | None = None) -> Path:
    """`RUNS/NAME-PROFILE[-TAG]`: every run folder of the course is named by this rule."""
    return Path(runs if runs is not None else runs_dir()) / "-".join(p for p in (name, profile, tag) if p)


def pretraining_folder(arch: str, profile: str, *, whole_word: bool = False, runs: str | Path | None = None) -> Path:
    """`RUNS/pretrain-ARCH[-whole-word]-PROFILE`: what `bertcourse pretrain` writes by default, lesson 3 trains,
    and `compare` and lessons 4 and 6 reuse when its metrics.json says it finished."""
    return run_folder(f"pretrain-{arch}{'-whole-word' if whole_word else ''}", profile, runs=runs)


def finetuning_folder(arch: str, regime: str, init: str, profile: str, seed: int,
                      runs: str | Path | None = None) -> Path:
    """`RUNS/finetune-ARCH-REGIME-INIT-PROFILE-seedN`: one folder per setting, so a rerun finds its run."""
    return run_folder(f"finetune-{arch}-{regime}-{init}", profile, tag=f"seed{seed}", runs=runs)


def results_folder(name: str, profile: str, *, runs: str | Path | None = None) -> Path:
    """`RUNS/results/NAME-PROFILE`: a report a later lesson reads (lesson 4's `sst2-PROFILE`, whose predictions
    lesson 5 tests; its label curve), kept with the runs so that it outlives a Colab runtime as they do
    ($BERTCOURSE_RUNS in Drive), where a `results/` in the course root would be lost with the VM."""
    return Path(runs if runs is not None else runs_dir()) / "results" / f"{name}-{profile}"


def settings_folder(name: str, profile: str, corpus: Any, course: Any = None, runs: str | Path | None = None) -> Path:
    """`RUNS/NAME-PROFILE-DIGEST`, the digest covering the profile's settings and the corpus: a lesson's own
    experiment (lesson 2's two short BERTs). A notebook that reruns finds its checkpoint and resumes; after a
    course update changes the profile (or with other data) it starts in a new folder instead of being refused
    by the resume check."""
    from bertcourse.course import load_course

    course = course or load_course()
    digest = hashlib.sha256(f"{course.profile(profile)!r}\n{corpus.fingerprint()}".encode()).hexdigest()[:12]
    return run_folder(name, profile, tag=digest, runs=runs if runs is not None else runs_dir(course))


__all__ = ["RUNS_ENV", "finetuning_folder", "pretraining_folder", "results_folder", "run_folder", "runs_dir",
           "settings_folder"]
