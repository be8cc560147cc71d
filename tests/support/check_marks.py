"""The hidden checks of a check module, read without grading anything: a test that only reads them (which
checks exist, their marks) needs none of the gradings tests/support/check_proofs.py shares."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHECKS_DIR = ROOT / "autograder" / "checks"


@functools.cache
def _load(path: Path):
    if str(CHECKS_DIR) not in sys.path:  # the check modules import their shared helpers as `_common`
        sys.path.insert(0, str(CHECKS_DIR))
    spec = importlib.util.spec_from_file_location(f"hidden_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checks_of(check_module: str) -> dict[str, dict[str, Any]]:
    """{check name: its mark's kwargs (cell, points, feedback)} for a check module."""
    module = _load(ROOT / check_module)
    found = {}
    for name in dir(module):
        function = getattr(module, name)
        if name.startswith("test_") and callable(function):
            marks = [m for m in getattr(function, "pytestmark", []) if m.name == "check"]
            assert len(marks) == 1, f"{name} must carry exactly one check mark"
            found[name] = dict(marks[0].kwargs)
    return found
