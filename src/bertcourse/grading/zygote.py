"""The zygote: imports torch and IPython once, then forks one confined worker per notebook.

Run as `python -m bertcourse.grading.zygote FD` by the engine (`processes.ZygoteProcess`); FD is a
SOCK_SEQPACKET socket. The zygote answers `{"op": "fork", ...}` with the worker's pid and one end of a
fresh socket pair (SCM_RIGHTS). The forked worker confines itself (sandbox.py: namespaces, Landlock,
no Unix sockets, no privileges, resource limits) and then runs `worker.Worker`. Everything from the
fork on runs next to student code and is trusted by nobody: the engine enforces the limits from
outside and the judge treats every reply as untrusted data.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
from typing import Any

from bertcourse.grading.protocol import Channel
from bertcourse.grading.sandbox import (
    SandboxPolicy,
    drop_privileges,
    forbid_unix_sockets,
    isolate,
    limit_resources,
    private_proc,
    restrict_filesystem,
)
from bertcourse.grading.worker import Worker  # imports torch, numpy and IPython: once, for every fork

# ----------------------------------------------------------------------------- zygote


def zygote_main(fd: int) -> None:
    """Serve the engine's `preload` and `fork` requests on socket `fd` until it closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    channel = socket.socket(fileno=fd)
    while True:
        try:
            raw = channel.recv(1 << 20)
        except (ConnectionError, OSError):
            return
        if not raw:
            return
        request = json.loads(raw)
        if request["op"] == "preload":
            for name in request["modules"]:
                try:
                    importlib.import_module(name)
                except Exception:  # a broken optional package must not take the zygote down
                    pass
            channel.send(b"{}")
        elif request["op"] == "fork":
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            report_r, report_w = os.pipe()  # the worker's pid, once it is known (it may fork again)
            pid = os.fork()
            if pid == 0:
                channel.close()
                ours.close()
                os.close(report_r)
                code = 0
                try:
                    _start_worker(theirs.detach(), request, report_w)
                except BaseException:  # noqa: B036 - the worker must never return into the zygote loop
                    code = 1
                os._exit(code)
            theirs.close()
            os.close(report_w)
            worker_pid = _read_pid(report_r) or pid
            os.close(report_r)
            socket.send_fds(channel, [json.dumps({"pid": worker_pid}).encode()], [ours.fileno()])
            ours.close()
        else:
            return


# ----------------------------------------------------------------------------- worker set-up


def _read_pid(fd: int, timeout_s: float = 30.0) -> int | None:
    """The worker's pid as the forked child reports it through a pipe (None when it does not)."""
    if not select.select([fd], [], [], timeout_s)[0]:
        return None
    try:
        return int(os.read(fd, 32).decode() or "0") or None
    except (OSError, ValueError):
        return None


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _isolated(fd: int, report_fd: int, keep: list[str]) -> str | None:
    """Enter new namespaces and fork the worker proper, PID 1 of its PID namespace (with its own
    /proc). This process stays behind only to report that worker's pid (as the engine sees it) and
    to wait for it; the worker dies with it. Returns, in the worker, why isolation failed (or None)."""
    problem = isolate()
    if problem:
        os.write(report_fd, str(os.getpid()).encode())  # this process is the worker after all
        os.close(report_fd)
        return problem
    child = os.fork()
    if child:
        os.write(report_fd, str(child).encode())
        os.close(report_fd)
        os.close(fd)
        _, status = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    os.close(report_fd)
    os.setsid()  # the engine kills the worker's process group; as PID 1 its death ends the namespace
    _die_with_parent()
    return private_proc(keep)


def _start_worker(fd: int, request: dict[str, Any], report_fd: int) -> None:
    """In the forked child: confine this process as `request` says, then run the notebook's Worker."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's SIG_IGN would break subprocess waits
    os.setsid()  # own process group: the engine kills the worker and anything it started at once
    _die_with_parent()  # with the zygote
    problems: list[str | None] = []
    if request.get("sandbox"):
        policy = request["sandbox"]
        problems.append(_isolated(fd, report_fd, [*policy["write"], *policy["read"]]))
    else:
        os.write(report_fd, str(os.getpid()).encode())
        os.close(report_fd)
    work_dir = request["work_dir"]
    os.chdir(work_dir)
    os.environ.clear()
    os.environ.update(request["env"])
    # tempfile caches the temporary folder the zygote found (its own scratch, not writable here): forget it,
    # so that the worker's TMPDIR counts (torch.optim imports torch._dynamo, which makes a cache folder there)
    tempfile.tempdir = None
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(os.path.join(work_dir, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if request.get("sandbox"):
        problems.append(restrict_filesystem(SandboxPolicy(**request["sandbox"])))
        problems.append(forbid_unix_sockets())
    limit_resources(int(request["memory_limit_mb"]), int(request["max_output_bytes"]))
    if request.get("sandbox"):
        drop_privileges()
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    sys.path.insert(0, request["submission_dir"])  # the submission's own helper modules, as in Jupyter
    import torch  # preloaded by the zygote: only fetched from sys.modules here

    torch.set_num_threads(int(request.get("threads", 1)))
    conn = Channel.from_fd(fd)
    conn.send({"op": "hello", "sandbox_problem": "; ".join(p for p in problems if p) or None})
    Worker(conn).run()




if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bertcourse.grading.zygote FD  (started by the grading engine)")
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())] or sys.path
    zygote_main(int(sys.argv[1]))
    os._exit(0)  # nothing to flush; skips a slow interpreter shutdown with torch loaded
