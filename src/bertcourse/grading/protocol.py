"""Messages between the engine, the worker and the judge: a JSON header plus an optional binary blob.

Values travel as `torch.save` bytes and are read with `torch.load(weights_only=True)`, so nothing a
submission sends can make the judge run code while unpickling. The judge's arguments to the worker,
which only the worker reads, go as `marshal` bytes when they are plain data (`dump_args`): torch.save
and its weights-only reader spend seconds on a list of a million numbers, marshal milliseconds.
`Remote` stands for an object that lives in the worker (a student's model, a generator); only its id
crosses the pipe.
"""

from __future__ import annotations

import io
import json
import marshal
import socket
import struct
import time
import zipfile
from dataclasses import dataclass
from typing import Any

MAX_MESSAGE_BYTES = 512 * 1024 * 1024  # a reply larger than this counts as a broken worker
REMOTE_KEY = "__bertcourse_remote__"
_MARSHALLED = b"bertcourse-marshal-1\0"  # what starts a dump_args blob of plain data
_LENGTH = struct.Struct(">Q")


@dataclass(frozen=True)
class Remote:
    """A handle on an object that lives in the worker; valid within one check."""

    id: int
    type_name: str = "object"

    def __repr__(self) -> str:
        return f"<remote {self.type_name} #{self.id}>"


class ProtocolError(Exception):
    """A message that could not be read: the other side broke the protocol or died."""


class Channel:
    """Length-prefixed messages over a stream socket, with timeouts on both directions.

    The engine talks to untrusted workers through it: a peer that stops half-way through a message
    makes `recv` time out (keeping what arrived) instead of blocking the engine forever.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buffer = bytearray()

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        """A channel over the socket whose file descriptor a parent passed."""
        return cls(socket.socket(fileno=fd))

    def fileno(self) -> int:
        """The socket's file descriptor."""
        return self.sock.fileno()

    def send(self, header: dict[str, Any], blob: bytes = b"", timeout: float | None = None) -> None:
        """Send one message (a JSON header and a binary blob) within `timeout` seconds."""
        payload = json.dumps(header).encode() + b"\0" + blob
        self.sock.settimeout(timeout)
        self.sock.sendall(_LENGTH.pack(len(payload)) + payload)

    def recv(self, timeout: float | None = None) -> tuple[dict[str, Any], bytes]:
        """One message. EOFError when the peer has gone, TimeoutError (partial data kept) when it is
        silent for `timeout` seconds, ProtocolError when the message is garbage or too large."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self._buffer) >= _LENGTH.size:
                (size,) = _LENGTH.unpack_from(self._buffer)
                if size > MAX_MESSAGE_BYTES:
                    raise ProtocolError(f"message of {size} bytes is larger than {MAX_MESSAGE_BYTES}")
                if len(self._buffer) >= _LENGTH.size + size:
                    raw = bytes(self._buffer[_LENGTH.size:_LENGTH.size + size])
                    del self._buffer[:_LENGTH.size + size]
                    return _decode(raw)
                want = _LENGTH.size + size - len(self._buffer)
            else:
                want = _LENGTH.size - len(self._buffer)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no complete message in time")
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                chunk = self.sock.recv(min(max(want, 1 << 16), 1 << 24))
            except TimeoutError:
                raise TimeoutError("no complete message in time") from None
            except OSError as exc:
                raise EOFError(str(exc)) from exc
            if not chunk:
                raise EOFError("the other side closed the connection")
            self._buffer += chunk

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()


def _decode(raw: bytes) -> tuple[dict[str, Any], bytes]:
    head, sep, blob = raw.partition(b"\0")
    try:
        header = json.loads(head)
    except ValueError as exc:
        raise ProtocolError("message header is not JSON") from exc
    if not sep or not isinstance(header, dict):
        raise ProtocolError("message header is malformed")
    return header, blob


def dump_values(value: Any) -> bytes:
    """`value` (nested data with Remote handles) as torch.save bytes; handles become marker dicts."""
    import torch

    buffer = io.BytesIO()
    torch.save(_mark_remotes(value), buffer)
    return buffer.getvalue()


def load_values(blob: bytes) -> Any:
    """Inverse of dump_values with weights_only=True: only tensors and plain containers come back."""
    import torch

    _check_archive(blob)
    return _unmark_remotes(torch.load(io.BytesIO(blob), weights_only=True))


def dump_args(value: Any) -> bytes:
    """The judge's arguments for the worker: plain data (numbers, strings, bytes, lists, tuples, dicts, sets and
    Remote handles, nothing else, not even a subclass) as marshal bytes, anything else (tensors) as dump_values.
    The worker trusts the judge; what comes back from the worker is read by load_values, which refuses these."""
    marked = _mark_remotes(value)
    try:
        return _MARSHALLED + marshal.dumps(marked)
    except ValueError:  # not plain data: marshal refuses it whole
        return dump_values(value)


def load_args(blob: bytes) -> Any:
    """Inverse of dump_args, in the worker."""
    if blob.startswith(_MARSHALLED):
        return _unmark_remotes(marshal.loads(blob[len(_MARSHALLED):]))
    return load_values(blob)


def _check_archive(blob: bytes) -> None:
    """torch.save writes an uncompressed zip; refuse anything else (a compressed member could be a
    zip bomb that makes the judge run out of memory while loading)."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile as exc:
        raise ProtocolError(f"not a torch.save archive: {exc}") from exc
    if any(m.compress_type != zipfile.ZIP_STORED for m in members) or sum(m.file_size for m in members) > len(blob):
        raise ProtocolError("a torch.save archive with compressed or oversized members")


_LEAVES = frozenset({int, float, complex, str, bytes, bool, type(None)})


def _only_leaves(items: list | tuple) -> bool:
    """Whether a list or tuple holds nothing to mark or unmark (numbers, strings, None): checked in C, so a list
    of a million numbers is not walked in Python."""
    return set(map(type, items)) <= _LEAVES


def _mark_remotes(value: Any) -> Any:
    if isinstance(value, Remote):
        return {REMOTE_KEY: value.id, "type": value.type_name}
    if type(value) in (list, tuple) and _only_leaves(value):  # exactly: a subclass becomes a plain copy below
        return value
    if isinstance(value, list):
        return [_mark_remotes(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_mark_remotes(v) for v in value)
    if isinstance(value, dict):
        return {k: _mark_remotes(v) for k, v in value.items()}
    return value


def _unmark_remotes(value: Any) -> Any:
    if isinstance(value, dict):
        if REMOTE_KEY in value and len(value) == 2:
            return Remote(int(value[REMOTE_KEY]), str(value.get("type", "object")))
        return {k: _unmark_remotes(v) for k, v in value.items()}
    if type(value) in (list, tuple) and _only_leaves(value):  # exactly: a subclass becomes a plain copy below
        return value
    if isinstance(value, list):
        return [_unmark_remotes(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_unmark_remotes(v) for v in value)
    return value
