"""Run a hidden-check module against a student implementation given as source, for the check proofs.

`run_checks(check_module, source)` returns {check name: passed}. It uses the grading engine's own
helper (`bertcourse.grading.testing`) when that exists, so the proofs exercise the real worker/judge
path; otherwise it runs the checks in this process with a stand-in `student` that copies every tensor
across the boundary both ways, as the real worker does.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]


class _Remote:
    def __init__(self, key: int):
        self.key = key


class InProcessStudent:
    """The `student` fixture's API over a namespace produced by exec'ing the student's source."""

    def __init__(self, source: str):
        self.namespace: dict[str, Any] = {"__name__": "student"}
        exec(compile(source, "<student>", "exec"), self.namespace)
        self.objects: dict[int, Any] = {}

    def _remote(self, value: Any) -> _Remote:
        key = len(self.objects) + 1
        self.objects[key] = value
        return _Remote(key)

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, _Remote):
            return self.objects[value.key]
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: self._resolve(v) for k, v in value.items()}
        return copy.deepcopy(value)  # data crosses as a copy

    def _data(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (list, tuple)):
            return type(value)(self._data(v) for v in value)
        if isinstance(value, dict):
            return {k: self._data(v) for k, v in value.items()}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return self._remote(value)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name not in self.namespace:
            raise AssertionError(f"`{name}` is not defined")
        return self._data(self.namespace[name](*self._resolve(args), **self._resolve(kwargs)))

    def generator(self, seed: int) -> _Remote:
        return self._remote(torch.Generator().manual_seed(int(seed)))

    def put(self, value: Any) -> _Remote:
        return self._remote(self._resolve(value))

    def get(self, remote: _Remote) -> Any:
        return self._data(self.objects[remote.key])

    def has(self, name: str) -> bool:
        return name in self.namespace

    def value(self, name: str) -> Any:
        if name not in self.namespace:
            raise AssertionError(f"`{name}` is not defined")
        return self._data(self.namespace[name])


@functools.cache
def _load(path: Path):
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


def _run_in_process(check_module: str, source: str, only: set[str] | None) -> dict[str, bool]:
    module = _load(ROOT / check_module)
    results = {}
    for name in checks_of(check_module):
        if only is not None and name not in only:
            continue
        student = InProcessStudent(source)
        try:
            getattr(module, name)(student)
            results[name] = True
        except Exception:  # a failed assertion or the student's code raising: the check fails
            results[name] = False
    return results


def run_checks(check_module: str, source: str, only: set[str] | None = None) -> dict[str, bool]:
    """{check name: passed} for `source` judged by `check_module` (a path relative to the course root),
    for all its checks or `only` those named."""
    try:
        from bertcourse.grading import testing  # the engine's helper, once it exists
    except ImportError:
        return _run_in_process(check_module, source, only)
    return testing.run_check_module(ROOT / check_module, source)  # pragma: no cover - depends on engine
