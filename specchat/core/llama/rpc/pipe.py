"""The target worker's wire format: an 8-byte little-endian length, then a pickled tuple.

Both ends are specchat processes on one machine (the worker is the app's own
child), so pickle carries numbers, token lists and dataclasses as they are.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any, BinaryIO

_HEADER = struct.Struct("<Q")


class PipeTimeoutError(Exception):
    """Nothing complete arrived before the deadline."""


def write_message(out: BinaryIO, message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def read_message(inp: BinaryIO) -> tuple[Any, ...] | None:
    """The next message, or None at the end of the stream (blocking)."""
    header = _read_exact(inp, _HEADER.size)
    if header is None:
        return None
    body = _read_exact(inp, _HEADER.unpack(header)[0])
    if body is None:
        return None
    message = pickle.loads(body)
    assert isinstance(message, tuple)
    return message


def _read_exact(inp: BinaryIO, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = inp.read(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Reader:
    """Reads messages from a pipe's file descriptor with a deadline (``select``, so POSIX only)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()

    def read(self, deadline: float, *, tick: float = 0.1, keep_waiting: Any = None) -> tuple[Any, ...] | None:
        """The next message; None when the writer closed the pipe; PipeTimeoutError past ``deadline``.

        ``keep_waiting`` (a callable) is asked every ``tick`` seconds; False ends
        the wait as a timeout (Stop pressed while a server does not answer).
        """
        while True:
            if len(self._buf) >= _HEADER.size:
                size = _HEADER.unpack_from(self._buf)[0]
                if len(self._buf) >= _HEADER.size + size:
                    body = bytes(self._buf[_HEADER.size : _HEADER.size + size])
                    del self._buf[: _HEADER.size + size]
                    message = pickle.loads(body)
                    assert isinstance(message, tuple)
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or (keep_waiting is not None and not keep_waiting()):
                raise PipeTimeoutError
            ready, _, _ = select.select([self.fd], [], [], min(left, tick))
            if ready:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    return None
                self._buf += chunk
