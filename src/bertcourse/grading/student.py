"""The `student` fixture of the hidden checks: the notebook's top-level names, reached through the engine.

Every `student.*` call becomes a request that the judge sends to the engine, which relays it to the
notebook's worker under the check's time and memory limits (session.py). Replies are loaded with
`torch.load(weights_only=True)` and re-checked here (`_plain`), so student code can send data but
never objects or code. The exceptions here are what a check sees when the student's code fails.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from bertcourse.grading.protocol import Channel, Remote, dump_args, load_values


class StudentError(Exception):
    """The student's code raised; the check fails with the student's exception type and message."""

    def __init__(self, type_name: str, message: str, student_traceback: str = ""):
        where = _raised_in(student_traceback) if type_name == "NotImplementedError" else ""
        super().__init__(f"your code raised {type_name}" + (f" in `{where}`" if where else "")
                         + (f": {message}" if message.strip() else ""))
        self.type_name = type_name
        self.student_message = message
        self.student_traceback = student_traceback


def _raised_in(student_traceback: str) -> str:
    """The function a traceback ends in ("" at a cell's top level): which unwritten stub was reached."""
    names = re.findall(r", in (\S+)\n", student_traceback)
    return names[-1] if names and not names[-1].startswith("<") else ""


class StudentMissing(StudentError):
    """A name the check needs is not defined at the top level of the notebook."""

    def __init__(self, name: str):
        Exception.__init__(self, f"`{name}` is not defined")
        self.type_name, self.student_message, self.student_traceback = "NameError", f"{name} is not defined", ""
        self.name = name


class Diagnosis(AssertionError):
    """A check's failure diagnosed from what the student's code did: `hint` replaces the check's own
    feedback, which is written for the mistake the check targets, when the code made another one
    (e.g. a biased pass@k failing the large-n check, whose feedback is about float overflow)."""

    def __init__(self, hint: str, message: str = ""):
        super().__init__(message or hint)
        self.hint = hint


class WorkerLost(Exception):
    """The student's process did not answer: out of time, out of memory, or crashed."""


class NotData(Exception):
    """The student's code gave back something that is not plain data where data was required."""


class Student:
    """The `student` fixture: the notebook's top-level names, reached through the engine."""

    def __init__(self, conn: Channel, limits: dict[str, Any], unavailable: str | None = None):
        self._conn = conn
        self._limits = limits
        self._lost = unavailable

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the student's top-level function or class `name`; data comes back as data."""
        return self._request({"op": "call", "name": name}, {"args": args, "kwargs": kwargs})

    def call_method(self, remote: Remote, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call `method` of a worker object; data comes back as data, anything else as a Remote."""
        return self._request({"op": "call_method", "handle": _handle(remote), "name": method},
                             {"args": args, "kwargs": kwargs})

    def getattr(self, remote: Remote, attribute: str, as_remote: bool = False) -> Any:
        """An attribute of a worker object; `attribute` may be a dotted path ("decoder.weight.grad").
        `as_remote=True` keeps it in the worker as a handle even when it is data (for `same`)."""
        return self._request({"op": "getattr", "handle": _handle(remote), "name": attribute,
                              "as_remote": bool(as_remote)})

    def ref(self, name: str) -> Remote:
        """A handle on the notebook's top-level object `name` (a function, say), e.g. for `backward`."""
        return self._request({"op": "ref", "name": name})

    def same(self, first: Remote, second: Remote) -> bool:
        """Whether two handles stand for the very same object in the worker (`is`), e.g. a tied Parameter."""
        return self._request({"op": "same", "handles": [_handle(first), _handle(second)]}) is True

    def backward(self, remote: Remote, method: str, *args: Any, grad_outputs: Any, **kwargs: Any) -> Any:
        """Run `remote.method(*args, **kwargs)` in the worker with autograd on and backpropagate.

        Floating-point tensors among `args` become leaves that require grad. `grad_outputs` is the
        gradient of the output: a tensor, or a tuple matching the output with None for the parts that
        get none (`(torch.tensor(1.0), None)` for a `(loss, logits)` result). Returns the data
        `{"output": ..., "input_grads": [the gradient of each of args, or None]}`; the gradients of the
        worker's parameters stay in their `.grad` (read them with `getattr(module, "weight.grad")`).
        """
        return self._request({"op": "backward", "handle": _handle(remote), "name": method},
                             {"args": args, "kwargs": kwargs, "grad_outputs": grad_outputs})

    def generator(self, seed: int) -> Remote:
        """A torch.Generator seeded with `seed`, living in the worker."""
        return self._request({"op": "generator", "seed": int(seed)})

    def put(self, value: Any) -> Remote:
        """Place data in the worker (to see, with `get`, whether the student's code changed it)."""
        return self._request({"op": "put"}, {"value": value})

    def get(self, remote: Remote) -> Any:
        """A worker object as data (NotData when it is not data)."""
        return self._request({"op": "get", "handle": _handle(remote)})

    def has(self, name: str) -> bool:
        """Whether the notebook defines the top-level name `name`."""
        return bool(self._request({"op": "has", "name": name}))

    def value(self, name: str) -> Any:
        """A top-level variable of the notebook, as data."""
        return self._request({"op": "value", "name": name})

    def _request(self, request: dict[str, Any], payload: Any = None) -> Any:
        if self._lost:
            raise WorkerLost(self._lost)
        self._conn.send({"op": "rpc", "request": request}, dump_args(payload) if payload is not None else b"")
        reply, blob = self._conn.recv()
        kind = reply.get("kind")
        if kind == "data":
            try:
                return _plain(load_values(blob))
            except Exception as exc:
                raise NotData(f"your code returned something that is not plain data ({exc})") from None
        if kind == "remote":
            return Remote(int(reply["id"]), str(reply.get("type", "object"))[:100])
        if kind == "student_error":
            raise StudentError(str(reply.get("type"))[:100], str(reply.get("message"))[:1000],
                               str(reply.get("traceback", ""))[:4000])
        if kind == "missing":
            raise StudentMissing(str(reply.get("name"))[:100])
        if kind == "not_data":
            raise NotData(str(reply.get("message"))[:300])
        if kind == "timeout":
            self._lost = f"your code did not finish within {self._limits['check_time_limit_s']:g} s"
        elif kind == "memory":
            self._lost = f"your code used more than {self._limits['memory_limit_mb']} MB of memory"
        elif kind == "lost":
            self._lost = str(reply.get("reason"))
        else:
            self._lost = "the notebook's process sent an invalid reply"
        raise WorkerLost(self._lost)


def _handle(remote: Any) -> int:
    if not isinstance(remote, Remote):
        raise TypeError(f"expected a Remote handle, got {type(remote).__name__}")
    return remote.id


_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _plain(value: Any) -> Any:
    """Accept only exact plain types (weights_only already refuses classes; this is belt and braces)."""
    if type(value) in _SCALARS or isinstance(value, (Remote, torch.dtype, torch.device, torch.Size)):
        return value
    if isinstance(value, torch.Tensor):
        return value if type(value) is torch.Tensor else value.detach().as_subclass(torch.Tensor)
    if type(value) is list:
        return [_plain(v) for v in value]
    if type(value) is tuple:
        return tuple(_plain(v) for v in value)
    if type(value) is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    raise NotData(f"unexpected {type(value).__name__} in a reply")
