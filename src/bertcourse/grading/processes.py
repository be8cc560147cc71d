"""The grader's helper processes: the zygote (forks workers) and the judge (runs the hidden checks).

Both are started with an environment built from an allow-list, so that no secret of the grader's
(BERTCOURSE_DB_URL, PGPASSWORD, tokens) reaches a process that runs next to student code, and both
keep their temporary files and logs in the grader's scratch folder, which `scratch_folder` names
after the grader's process so that the next grader removes what a killed one left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bertcourse.grading.protocol import Channel

ZYGOTE_TIMEOUT_S = 300.0  # a zygote still importing torch on a busy machine answers late
SCRATCH_PREFIX = "bertcourse-grader-"

# What the helper processes inherit from the grader's environment: nothing else.
INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "BERTCOURSE_DATA", "BERTCOURSE_PROFILE", "VIRTUAL_ENV",
                 "PYTHONPATH", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def helper_env(course_root: Path, scratch: Path, cache_dir: str) -> dict[str, str]:
    """The zygote's and the judge's environment: an allow-list, with temporary files in `scratch`.

    One OpenMP thread: a grade is a dialogue in which the judge and the worker take turns, so more threads
    never help, and on a machine with as many cores as grading lanes the judges' idle threads spin on the
    cores the other lanes need (two lanes side by side on 2 cores: 1.3-1.6 s a grade each with torch's
    default threads, 0.5-1.0 s with one; benchmarks/README.md)."""
    env = {k: v for k, v in os.environ.items() if k in INHERITED_ENV}
    env.update(PYTHONHASHSEED="0", BERTCOURSE_ROOT=str(course_root), PYTHONDONTWRITEBYTECODE="1",
               BERTCOURSE_CACHE=cache_dir, TMPDIR=str(scratch), OMP_NUM_THREADS="1")
    return env


def _pid_namespace() -> str:
    """This process's PID namespace: a pid names a process only within one namespace."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def scratch_folder() -> Path:
    """A new scratch folder for one Grader, named after this process, after removing the folders of
    graders whose process is gone (killed with SIGKILL, say): `bertcourse-grader-<pidns>-<pid>-*`."""
    root, namespace = Path(tempfile.gettempdir()), _pid_namespace()
    try:
        stale = [p for p in root.glob(f"{SCRATCH_PREFIX}{namespace}-*-*") if p.is_dir() and not p.is_symlink()]
    except OSError:
        stale = []
    for folder in stale:
        pid = folder.name[len(SCRATCH_PREFIX) + len(namespace) + 1:].split("-", 1)[0]
        try:
            if not pid.isdigit() or folder.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue  # alive (or not ours to ask about)
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{namespace}-{os.getpid()}-"))


class ZygoteProcess:
    """`python -m bertcourse.grading.zygote`: imports torch and IPython once, then forks one worker
    per notebook on request (the worker's socket comes back over SCM_RIGHTS)."""

    def __init__(self, course_root: Path, scratch: Path, cache_dir: str):
        # Message boundaries without framing: SEQPACKET on Linux, datagrams elsewhere (macOS).
        kind = socket.SOCK_SEQPACKET if sys.platform.startswith("linux") else socket.SOCK_DGRAM
        ours, theirs = socket.socketpair(socket.AF_UNIX, kind)
        self.log = open(scratch / "zygote.log", "ab")  # noqa: SIM115 - lives as long as the process
        # HOME and MPLCONFIGDIR in the grader's scratch folder: preloading (IPython, matplotlib's font
        # cache) writes there once, never in the real home, and every forked worker inherits the result.
        env = helper_env(course_root, scratch, cache_dir)
        env.update(HOME=str(scratch), MPLBACKEND="Agg", MPLCONFIGDIR=str(scratch / "matplotlib"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bertcourse.grading.zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], cwd=scratch, env=env,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        theirs.close()
        self.sock = ours
        self.sock.settimeout(ZYGOTE_TIMEOUT_S)  # its first answer waits for torch to import
        self.preloaded: set[str] = set()

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def preload(self, modules: list[str]) -> None:
        """Import `modules` in the zygote (once each), so that every worker forked later has them."""
        todo = [m for m in modules if m not in self.preloaded]
        if todo:
            self.sock.send(json.dumps({"op": "preload", "modules": todo}).encode())
            self.sock.recv(1024)
            self.preloaded.update(todo)

    def fork(self, request: dict[str, Any]) -> tuple[int, Channel]:
        """A new worker for one notebook: its pid (as this process sees it) and a channel to it."""
        self.sock.send(json.dumps({"op": "fork", **request}).encode())
        message, fds, _, _ = socket.recv_fds(self.sock, 1024, 1)
        if not message or not fds:
            raise OSError("the zygote did not answer")
        return int(json.loads(message)["pid"]), Channel(socket.socket(fileno=fds[0]))

    def stop(self) -> None:
        """Ask the process to end (closing its socket ends it), without waiting."""
        self.sock.close()

    def close(self) -> None:
        """Stop the process and close its log."""
        self.stop()
        stop_process(self.process)
        self.log.close()


class JudgeProcess:
    """`python -m bertcourse.grading.judge`: a long-lived pytest process that runs the hidden checks."""

    def __init__(self, course_root: Path, scratch: Path, cache_dir: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = helper_env(course_root, scratch, cache_dir)  # its own temporary folder goes in the scratch folder
        if os.environ.get("HOME"):
            env["HOME"] = os.environ["HOME"]
        self.log = open(scratch / "judge.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bertcourse.grading.judge", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], cwd=scratch, env=env,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        theirs.close()
        self.channel = Channel(ours)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def stop(self) -> None:
        """Ask the judge to exit, without waiting."""
        if self.channel.fileno() < 0:
            return  # asked already
        try:
            self.channel.send({"op": "exit"}, timeout=1)
        except OSError:
            pass
        self.channel.close()

    def close(self) -> None:
        """Ask the judge to exit, then make sure it did."""
        self.stop()
        stop_process(self.process)
        self.log.close()


def stop_process(process: subprocess.Popen) -> None:
    """Wait briefly for `process` to end, then kill it."""
    try:
        process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (a worker and all it started), else the process alone."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
