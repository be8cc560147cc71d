"""Small helpers every lesson and exercise notebook uses, so that none of them repeats set-up code."""

from __future__ import annotations

import os

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
