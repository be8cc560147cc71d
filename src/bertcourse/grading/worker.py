"""The worker: runs a notebook's code cells in an IPython shell, then answers the judge's requests.

One `Worker` lives in each process the zygote forks (zygote.py), already confined by the sandbox. It
reports each cell as it runs (`cell_start`, `cell_end` with status and output), says `ready`, then
serves the `student` API (call, getattr, backward, ...) until the engine closes its socket. Replies
are plain data (`torch.save` bytes) or handles on objects that stay here; everything here runs next to
student code, so the engine and the judge trust none of it.
"""

from __future__ import annotations

import io
import random
import signal
import sys
import traceback
from typing import Any

import numpy
import torch
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from bertcourse.grading.protocol import Channel, Remote, dump_values, load_args

OUTPUT_KEEP_CHARS = 2000  # what a cell record keeps of the cell's printed output


class _OutOfTime(BaseException):
    """Raised by SIGALRM inside student code; BaseException so `except Exception` cannot swallow it."""


class _CappedWriter(io.TextIOBase):
    """A stdout/stderr stand-in that keeps the first few thousand characters and drops the rest."""

    def __init__(self, keep: int):
        self.keep = keep
        self.parts: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        if self.size < self.keep:
            self.parts.append(str(text)[: self.keep - self.size])
        self.size += len(text)
        return len(text)

    def writable(self) -> bool:
        return True

    def value(self) -> str:
        text = "".join(self.parts)
        return text + ("\n[... output cut]" if self.size > self.keep else "")


def _alarm(signum: int, frame: Any) -> None:
    raise _OutOfTime()


class Worker:
    """Runs the cells, then serves requests. One instance per forked process."""

    def __init__(self, conn: Channel):
        self.conn = conn
        self.handles: dict[int, Any] = {}
        self.shell: Any = None

    def run(self) -> None:
        """Run the cells the engine sends (reporting each), say `ready`, then answer requests."""
        header, _ = self.conn.recv()
        self.shell = self._make_shell()
        _seed_everything(0)  # notebooks that draw random numbers run the same way every time
        for cell in header["cells"]:
            self.conn.send({"op": "cell_start", "index": cell["index"]})
            record = self._run_cell(cell, float(header["cell_time_limit_s"]))
            self.conn.send({"op": "cell_end", **record})
        self.conn.send({"op": "ready"})
        self._serve()

    @staticmethod
    def _make_shell() -> Any:
        config = Config()
        config.HistoryManager.enabled = False
        config.InteractiveShell.colors = "nocolor"
        config.InteractiveShell.xmode = "Plain"
        shell = InteractiveShell.instance(config=config)
        shell.user_ns["__name__"] = "__main__"
        return shell

    def _run_cell(self, cell: dict[str, Any], limit_s: float) -> dict[str, Any]:
        capture = _CappedWriter(OUTPUT_KEEP_CHARS)
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = capture
        old_handler = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, max(limit_s, 0.01))
        status, error = "ok", ""
        try:
            result = self.shell.run_cell(cell["source"], store_history=False, silent=False)
            exc = result.error_before_exec or result.error_in_exec
            if isinstance(exc, _OutOfTime):
                status, error = "timeout", f"the cell did not finish within {limit_s:g} s"
            elif isinstance(exc, MemoryError) or "can't allocate memory" in str(exc):
                status, error = "memory", "the cell ran out of memory (MemoryError)"
            elif exc is not None:
                status, error = "error", _described(exc)
        except _OutOfTime:
            status, error = "timeout", f"the cell did not finish within {limit_s:g} s"
        except BaseException as exc:  # noqa: B036 - whatever the cell raises is the cell's failure
            status, error = "error", _described(exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
            sys.stdout, sys.stderr = saved
        return {"index": cell["index"], "grade_id": cell.get("grade_id"), "status": status, "error": error,
                "output": capture.value()}

    # ------------------------------------------------------------------------- serving the judge

    def _serve(self) -> None:
        while True:
            try:
                header, blob = self.conn.recv()
            except (EOFError, OSError):
                return
            capture = _CappedWriter(0)
            saved = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = capture
            deadline = float(header.get("deadline_s") or 0)
            old_handler = signal.signal(signal.SIGALRM, _alarm)
            if deadline > 0:
                signal.setitimer(signal.ITIMER_REAL, deadline)
            try:
                reply = self._handle(header, blob)
            except _OutOfTime:
                reply = ({"kind": "timeout"}, b"")
            except MemoryError:
                reply = ({"kind": "memory"}, b"")
            except _Missing as exc:
                reply = ({"kind": "missing", "name": str(exc)}, b"")
            except _NotData as exc:
                reply = ({"kind": "not_data", "message": str(exc)}, b"")
            except BaseException as exc:  # noqa: B036 - the student's exception becomes the check's failure
                if "can't allocate memory" in str(exc):  # torch's allocator hit RLIMIT_DATA
                    reply = ({"kind": "memory"}, b"")
                else:
                    reply = ({"kind": "student_error", "type": type(exc).__name__, "message": _short(str(exc)),
                              "traceback": _short(traceback.format_exc(), 4000)}, b"")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old_handler)
                sys.stdout, sys.stderr = saved
            self.conn.send(*reply)

    def _handle(self, header: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], bytes]:
        op = header["op"]
        args = self._resolve(load_args(blob)) if blob else {}
        if op == "reset":
            self.handles.clear()
            _seed_everything(int(header.get("seed", 0)))
            return {"kind": "data"}, dump_values(None)
        if op == "has":
            return {"kind": "data"}, dump_values(header["name"] in self.shell.user_ns)
        if op == "value":
            value = self._lookup(header["name"])
            return {"kind": "data"}, dump_values(_as_data(value, f"`{header['name']}`"))
        if op == "ref":
            return self._as_remote(self._lookup(header["name"]))
        if op == "call":
            result = self._lookup(header["name"])(*args["args"], **args["kwargs"])
        elif op == "call_method":
            target = self._handle_of(header["handle"])
            result = getattr(target, header["name"])(*args["args"], **args["kwargs"])
        elif op == "getattr":
            result = self._handle_of(header["handle"])
            for part in str(header["name"]).split("."):  # a dotted path: "decoder.weight.grad"
                result = getattr(result, part)
            if header.get("as_remote"):
                return self._as_remote(result)
        elif op == "same":
            first, second = (self._handle_of(int(h)) for h in header["handles"])
            return {"kind": "data"}, dump_values(first is second)
        elif op == "backward":
            result = _backward(self._handle_of(header["handle"]), header["name"], args)
        elif op == "generator":
            result = torch.Generator().manual_seed(int(header["seed"]))
            return self._as_remote(result)
        elif op == "put":
            return self._as_remote(args["value"])
        elif op == "get":
            value = self._handle_of(header["handle"])
            return {"kind": "data"}, dump_values(_as_data(value, "the object"))
        else:
            raise ValueError(f"unknown request {op!r}")
        try:
            return {"kind": "data"}, dump_values(_as_data(result, "the result"))
        except _NotData:
            return self._as_remote(result)

    def _lookup(self, name: str) -> Any:
        if name not in self.shell.user_ns:
            raise _Missing(name)
        return self.shell.user_ns[name]

    def _handle_of(self, handle_id: int) -> Any:
        if handle_id not in self.handles:
            raise ValueError("this handle is no longer valid")
        return self.handles[handle_id]

    def _as_remote(self, value: Any) -> tuple[dict[str, Any], bytes]:
        handle_id = len(self.handles) + 1
        self.handles[handle_id] = value
        return {"kind": "remote", "id": handle_id, "type": type(value).__name__}, b""

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, Remote):
            return self._handle_of(value.id)
        if isinstance(value, list):
            return [self._resolve(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: self._resolve(v) for k, v in value.items()}
        return value


def _backward(target: Any, method: str, args: dict[str, Any]) -> dict[str, Any]:
    """`target.method(*args, **kwargs)` with autograd on, then backward with `grad_outputs` (see
    `Student.backward`): floating-point tensor arguments become leaves whose gradients come back."""
    leaves = [a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point()
              else a for a in args["args"]]
    with torch.enable_grad():  # a notebook may have switched autograd off globally
        output = getattr(target, method)(*leaves, **args["kwargs"])
        pairs = _gradient_pairs(output, args["grad_outputs"], "the result")
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    grads = [leaf.grad if leaf is not original else None for leaf, original in zip(leaves, args["args"])]
    return {"output": output, "input_grads": grads}


def _gradient_pairs(output: Any, grad: Any, what: str) -> list[tuple[Any, Any]]:
    """(output tensor, its gradient) pairs, matching `grad` (a tensor, or a tuple/list with None) to `output`."""
    if grad is None:
        return []
    if isinstance(grad, torch.Tensor):
        if not isinstance(output, torch.Tensor):
            raise _NotData(f"{what} is a {type(output).__name__}, not a tensor")
        if not output.requires_grad:
            raise _NotData(f"{what} does not depend on its inputs through autograd (detached or computed "
                           "under no_grad)")
        if output.shape != grad.shape:
            raise _NotData(f"{what} has shape {tuple(output.shape)}, expected {tuple(grad.shape)}")
        return [(output, grad.to(output.dtype))]
    if not isinstance(output, (tuple, list)) or len(output) != len(grad):
        raise _NotData(f"{what} is a {type(output).__name__}, not a tuple of {len(grad)}")
    return [pair for i, (o, g) in enumerate(zip(output, grad)) for pair in _gradient_pairs(o, g, f"{what}[{i}]")]


class _Missing(Exception):
    """The notebook defines no top-level name the judge asked for (the message is the name)."""


class _NotData(Exception):
    """A value that had to come back as data is not plain data (the message says what it is)."""


def _as_data(value: Any, what: str, depth: int = 0) -> Any:
    """`value` as plain data (exact builtin types, plain CPU tensors), or _NotData."""
    if depth > 50:
        raise _NotData(f"{what} is nested too deeply")
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return value
    if isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            plain = value.detach()
            if type(plain) is not torch.Tensor:
                plain = plain.as_subclass(torch.Tensor)
            return plain.cpu().clone() if plain.device.type != "cpu" else plain
    if isinstance(value, (torch.Size, torch.dtype, torch.device)):
        return value
    if isinstance(value, numpy.ndarray) and value.dtype.kind in "biufc":
        return torch.from_numpy(numpy.ascontiguousarray(value))
    if isinstance(value, numpy.generic) and value.dtype.kind in "biufc":
        return value.item()
    if isinstance(value, bool):
        return bool(value)
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, list):
        return [_as_data(v, what, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(_as_data(v, what, depth + 1) for v in value)
    if isinstance(value, dict):
        return {_as_data(k, what, depth + 1): _as_data(v, what, depth + 1) for k, v in value.items()}
    raise _NotData(f"{what} is a {type(value).__name__}, not plain data")


def _seed_everything(seed: int) -> None:
    """Seed every generator a notebook may draw from without a generator of its own."""
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def _described(exc: BaseException) -> str:
    """`Type: message`, or the type alone (no dangling colon); nbgrader's bare stub says it is not written."""
    message = _short(str(exc)).strip()
    if not message and isinstance(exc, NotImplementedError):
        message = "not written yet"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _short(text: str, limit: int = 1000) -> str:
    """`text` cut to `limit` characters, saying so."""
    return text if len(text) <= limit else text[:limit] + " [...]"
