"""The supervisor of one notebook's worker: start (and restart) it, relay the judge's requests, enforce
the limits.

A `NotebookSession` forks a worker from the zygote, has it run the notebook's code cells and then
relays every `student.*` request of the judge to it. It enforces per-cell and per-check time limits
(`check_time_limit_s`), each graded part's budget and the notebook's (budgets.py), and the memory
limit (an RSS watchdog reading /proc). A worker that dies or hangs is restarted, re-running the
notebook without the cell that killed it, for the remaining checks.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertcourse.course import Exercise
from bertcourse.grading.budgets import NOTEBOOK, TimeBudgets
from bertcourse.grading.processes import kill_group
from bertcourse.grading.protocol import Channel, ProtocolError
from bertcourse.grading.results import CellRecord, NotebookResult
from bertcourse.grading.sandbox import default_policy, rss_mb
from bertcourse.grading.submission import NotebookCells

GRACE_S = 2.0  # how long past a soft time limit the engine waits before killing the worker
POLL_S = 0.05  # memory watchdog period
STARTUP_TIMEOUT_S = 60.0
MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # what a worker may write to its stdout/stderr file
# Top-level packages the zygote may import ahead of time when a notebook imports them.
PRELOADABLE = {"torch", "numpy", "transformers", "tokenizers", "datasets", "matplotlib", "tqdm", "sklearn",
               "bertcourse", "scipy", "pandas"}
_IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", re.MULTILINE)

# fork(request, modules to preload) -> (the worker's pid, a channel to it): the Grader's zygote.
ForkWorker = Callable[[dict[str, Any], list[str]], tuple[int, Channel]]


@dataclass(frozen=True)
class WorkerSettings:
    """What every worker of one Grader gets (see `Grader.__init__`)."""

    course_root: Path
    scratch: Path  # the Grader's scratch folder: each worker's own folder goes in it
    sandbox: str  # auto | require | off
    threads: int
    profile: str | None
    cache_dir: str
    extra_read: list[str] = field(default_factory=list)
    extra_write: list[str] = field(default_factory=list)


class _WorkerStopped(Exception):
    """The worker is gone: `status` is timeout | crashed | memory | time-limit."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


class NotebookSession:
    """The worker of one notebook, from its first start to the last check (see the module doc)."""

    def __init__(self, settings: WorkerSettings, fork: ForkWorker, ex: Exercise, cells: NotebookCells,
                 submission_dir: Path, checks_file: Path, result: NotebookResult,
                 part_of: dict[str, str] | None = None):
        self.settings, self.fork, self.ex, self.cells, self.result = settings, fork, ex, cells, result
        self.submission_dir, self.checks_file = submission_dir, checks_file
        self.part_of = part_of or {}  # check name -> its part (the test cell's grade_id)
        self.budgets = TimeBudgets(ex.time_limit_s, ex.part_limit_s)
        self.part = ""  # the part of the check being run
        self.part_bound = False  # whether the part's budget, not check_time_limit_s, ends this check
        self.refused: str | None = None  # why grading was refused (sandbox="require" without a sandbox)
        self.skipped_cells: set[int] = set()  # cells that killed a worker: later workers run without them
        self.cell_records: dict[int, CellRecord] = {}
        self.pid: int | None = None
        self.channel: Channel | None = None
        self.work_dir: Path | None = None
        self.no_more_workers: str | None = None  # why no worker can be started any more
        self.check_deadline = time.monotonic()
        self.sandbox_noted = False
        modules = {m for c in cells.to_run for m in _IMPORT.findall(c.source) if m.split(".")[0] in PRELOADABLE}
        if "torch" in {m.split(".")[0] for m in modules}:
            # A notebook's first optimizer makes torch.optim import torch._dynamo (~1.6 s in every fresh worker
            # that trains; ex01's checks load it too): imported once, by the zygote, for the notebooks that use
            # torch (not at its start: ~2 s that a notebook without torch never needs). Its import makes an
            # empty torchinductor_<user> folder in the zygote's own scratch TMPDIR, which no worker needs.
            modules.add("torch._dynamo")
        self.preload = sorted(modules)

    def bound_s(self) -> float:
        """The most seconds this notebook may still take, besides process starts."""
        return self.budgets.bound_s(set(self.part_of.values()))

    # -- limits and reasons

    def _reason(self, status: str, during: str) -> str:
        if status == "time-limit":
            return f"grading stopped: the notebook used up its time limit of {self.ex.time_limit_s:g} s"
        if status == "part-time-limit":
            return (f"grading of this part stopped: its checks used up their time limit of "
                    f"{self.budgets.part_limit_s:g} s")
        if status == "timeout":
            return f"your code did not finish within {self.ex.check_time_limit_s:g} s"
        if status == "memory":
            return f"your code used more than {self.ex.memory_limit_mb} MB of memory"
        return f"the Python process running your notebook crashed {during} (os._exit, a segfault or a kill)"

    def _await(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        """The worker's next message, watching its memory; _WorkerStopped when it dies, hangs or hogs memory."""
        assert self.channel is not None and self.pid is not None
        budgets = self.budgets
        notebook_end = time.monotonic() + budgets.left(NOTEBOOK) if budgets.clock == NOTEBOOK else float("inf")
        while True:
            now = time.monotonic()
            if now >= min(deadline, notebook_end):
                self._kill()
                raise _WorkerStopped("time-limit" if now >= notebook_end else "timeout")
            try:
                return self.channel.recv(timeout=min(POLL_S, min(deadline, notebook_end) - now))
            except TimeoutError:
                pass
            except (EOFError, ProtocolError, OSError):
                self._kill()
                raise _WorkerStopped("crashed") from None
            if rss_mb(self.pid) > self.ex.memory_limit_mb:
                self._kill()
                raise _WorkerStopped("memory")

    def _kill(self) -> None:
        if self.pid is not None:
            kill_group(self.pid)
        if self.channel is not None:
            self.channel.close()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        self.pid = self.channel = self.work_dir = None

    def close(self) -> None:
        """End the worker (if any) and remove its folder."""
        self._kill()

    # -- running the notebook

    def _fork(self) -> None:
        settings = self.settings
        self.work_dir = Path(tempfile.mkdtemp(prefix="worker-", dir=settings.scratch))
        policy = None
        if settings.sandbox != "off":
            policy = default_policy(settings.course_root, self.work_dir, self.submission_dir, self.checks_file,
                                    settings.extra_read, settings.extra_write).__dict__
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.work_dir),
               "TMPDIR": str(self.work_dir), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
               "BERTCOURSE_ROOT": str(settings.course_root), "BERTCOURSE_CACHE": settings.cache_dir,
               "NBGRADER_EXECUTION": "autograde", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(settings.threads), "TQDM_DISABLE": "1"}
        if os.environ.get("BERTCOURSE_DATA"):
            env["BERTCOURSE_DATA"] = os.path.abspath(os.environ["BERTCOURSE_DATA"])  # the worker cwd differs
        if settings.profile:
            env["BERTCOURSE_PROFILE"] = settings.profile
        request = {"work_dir": str(self.work_dir), "env": env, "sandbox": policy,
                   "memory_limit_mb": self.ex.memory_limit_mb, "max_output_bytes": MAX_OUTPUT_BYTES,
                   "submission_dir": str(self.submission_dir), "threads": settings.threads}
        self.pid, self.channel = self.fork(request, self.preload)

    def _start(self) -> str | None:
        """Start a worker and run the notebook; None when it is ready, else why checks cannot run."""
        limit = self.ex.check_time_limit_s
        while True:
            if self.budgets.left(NOTEBOOK) <= 0:
                self.no_more_workers = self._reason("time-limit", "")
                self._note_once("time-limit", self.no_more_workers)
                return self.no_more_workers
            self.budgets.charge(None)  # a cold or busy zygote is not the notebook's time
            self._fork()
            self.budgets.charge(NOTEBOOK)
            assert self.channel is not None
            current: int | None = None
            last: int | None = None
            try:
                hello, _ = self._await(time.monotonic() + STARTUP_TIMEOUT_S)
                problem = hello.get("sandbox_problem")
                if problem and self.settings.sandbox == "require":
                    self._kill()
                    self.no_more_workers = self.refused = f"not graded: the worker sandbox is required, but {problem}"
                    return self.no_more_workers
                if problem or self.settings.sandbox == "off":
                    if not self.sandbox_noted:
                        self.result.add_note("sandbox-unavailable", "the worker ran without a full sandbox "
                                             f"({problem or 'switched off'}): the hidden checks, the network or "
                                             "other processes may have been within its reach")
                        self.sandbox_noted = True
                if not sys.platform.startswith("linux"):
                    self._note_once("memory-unenforced", "the memory limit is enforced on Linux only (/proc)")
                cells = [c.to_wire() for c in self.cells.to_run if c.index not in self.skipped_cells]
                try:
                    self.channel.send({"op": "run", "cells": cells, "cell_time_limit_s": limit}, timeout=30)
                except OSError:
                    self._kill()
                    raise _WorkerStopped("crashed") from None
                while True:
                    header, _ = self._await(time.monotonic() + limit + GRACE_S)
                    op = header.get("op")
                    if op == "cell_start":
                        current = last = int(header["index"])
                    elif op == "cell_end":
                        self._record(header)
                        current = None
                    elif op == "ready":
                        return None
                    else:
                        raise _WorkerStopped("crashed")
            except _WorkerStopped as stopped:
                culprit = current if current is not None else last
                if stopped.status == "time-limit" or culprit is None:
                    self.no_more_workers = self._reason(stopped.status if culprit is not None else "crashed",
                                                        "while starting")
                    if culprit is not None:
                        self.cell_records[culprit] = CellRecord(culprit, self._grade_id(culprit), "timeout",
                                                                self.no_more_workers)
                    self._note_once(stopped.status, self.no_more_workers)
                    return self.no_more_workers
                self.skipped_cells.add(culprit)
                grade_id = self._grade_id(culprit)
                reason = self._reason(stopped.status, f"in cell {culprit}")
                self.cell_records[culprit] = CellRecord(culprit, grade_id, stopped.status, reason)
                self.result.add_note(f"cell-{stopped.status}", f"cell {culprit}"
                                     f"{f' ({grade_id})' if grade_id else ''}: {reason}; the notebook was re-run "
                                     "without it", grade_id)

    def _grade_id(self, index: int) -> str | None:
        return next((c.grade_id for c in self.cells.code if c.index == index), None)

    def _record(self, header: dict[str, Any]) -> None:
        index = int(header.get("index", -1))
        status = str(header.get("status", "error"))[:20]
        error = str(header.get("error", ""))[:2000]
        grade_id = self._grade_id(index)
        if status == "memory":
            error = f"the cell used more than {self.ex.memory_limit_mb} MB of memory ({error})"
        first_time = index not in self.cell_records
        self.cell_records[index] = CellRecord(index, grade_id, status, error, str(header.get("output", ""))[:2100])
        if status != "ok" and first_time:
            self.result.add_note(f"cell-{status}", f"cell {index}{f' ({grade_id})' if grade_id else ''}: {error}",
                                 grade_id)

    def _note_once(self, kind: str, message: str) -> None:
        if not any(n.message == message for n in self.result.notes):
            self.result.add_note(kind, message)

    # -- serving the judge

    def begin_check(self, name: str) -> str | None:
        """Get a worker ready for the check `name`; None when it is, else why the check cannot run."""
        self.part = self.part_of.get(name, "")
        self.budgets.charge(self.part)
        if self.no_more_workers:
            return self.no_more_workers
        if self.budgets.left(self.part) <= 0:
            return self._reason("part-time-limit", "")
        if self.channel is None:
            reason = self._start()
            self.budgets.charge(self.part)
            if reason:
                return reason
            if self.budgets.left(self.part) <= 0:
                return self._reason("part-time-limit", "")
        left = self.budgets.left(self.part)
        self.part_bound = left < self.ex.check_time_limit_s
        self.check_deadline = time.monotonic() + min(self.ex.check_time_limit_s, left)
        reply = self.relay({"op": "reset", "seed": zlib.crc32(name.encode())}, b"")
        return reply[0].get("reason") if reply[0].get("kind") == "lost" else None

    def end_checks(self) -> None:
        """Stop charging the last check's part."""
        self.budgets.charge(None)

    def relay(self, request: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], bytes]:
        """Send one request of the judge to the worker within the check's deadline; the worker's reply, or
        `{"kind": "lost", "reason": ...}` when it did not answer in time, crashed or hogged memory."""
        if self.channel is None:
            return {"kind": "lost", "reason": self.no_more_workers or "the notebook's process is gone"}, b""
        left = self.check_deadline - time.monotonic()
        try:
            if left <= 0:
                self._kill()
                raise _WorkerStopped("timeout")
            self.channel.send({**request, "deadline_s": max(left - 0.25, 0.05)}, blob, timeout=left + GRACE_S)
            reply = self._await(self.check_deadline + GRACE_S)
            if reply[0].get("kind") == "timeout" and self.part_bound:  # the part's time ran out, not the check's
                return {"kind": "lost", "reason": self._reason("part-time-limit", "")}, b""
            return reply
        except (OSError, TimeoutError):
            self._kill()
            reason = self._reason("crashed", "during this check")
        except _WorkerStopped as stopped:
            status = "part-time-limit" if stopped.status == "timeout" and self.part_bound else stopped.status
            reason = self._reason(status, "during this check")
        return {"kind": "lost", "reason": reason}, b""
