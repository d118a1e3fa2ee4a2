"""The process that holds a target on remote devices: ``python -m specchat.core.llama.rpc.worker``.

It speaks :mod:`specchat.core.llama.rpc.pipe` on its standard input and output
(whatever llama.cpp prints goes to standard error instead) and runs one
:class:`~specchat.core.llama.context.Context`. A lost server makes ggml
abort this process, never the app; the app sees the pipe close.

Requests are tuples ``(op, cut, *args)``; ``cut``, when not None, is a
truncation the app made since its last request, applied first (so a verify
round costs one exchange, not two). Each gets ``("ok", value, n_past, seconds)``
or ``("err", message, n_past, seconds)``, ``n_past`` being how many positions
the context holds afterwards and ``seconds`` the time spent here on it.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
import time
from typing import Any, BinaryIO

import llama_cpp
import numpy as np

from specchat.core.llama import backend
from specchat.core.llama.context import Context
from specchat.core.llama.model import Model
from specchat.core.llama.rpc import pipe
from specchat.core.llama.rpc.binding import add_servers, describe, has_rpc, local_devices
from specchat.core.remote import RPC_BUILD_HINT, ServerReport
from specchat.core.types import SpecchatError

_BUFFER = re.compile(r"(\S+) (model|KV|compute) buffer size =\s*([\d.]+) MiB")


class _Log:
    """llama.cpp's log in this process: errors kept as usual, buffer sizes collected for the load report."""

    def __init__(self) -> None:
        self.buffers: list[tuple[str, str, float]] = []
        echo = bool(os.environ.get("SPECCHAT_LLAMA_LOG"))

        @llama_cpp.llama_log_callback
        def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            line = text.decode("utf-8", "replace") if text else ""
            if level == 4:  # GGML_LOG_LEVEL_ERROR
                backend.recent_errors.append(line)
            match = _BUFFER.search(line)
            if match:
                self.buffers.append((match.group(1), match.group(2), float(match.group(3))))
            if echo:
                sys.stderr.write(line)

        self._callback = _log
        llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))


class Worker:
    """The requests' handlers; the context lives here."""

    def __init__(self) -> None:
        backend.ensure_backend()
        self.log = _Log()
        self.model: Model | None = None
        self.ctx: Context | None = None
        self.shared: np.memmap | None = None  # the app's logits file (see RemoteTarget._share_logits)

    @property
    def n_past(self) -> int:
        return self.ctx.n_past if self.ctx is not None else 0

    def handle(self, op: str, args: tuple[Any, ...]) -> Any:
        if op == "load":
            return self.load(**args[0])
        if op == "probe":
            return self.probe(args[0])
        if op == "ping":
            return os.getpid()
        ctx = self.ctx
        if ctx is None:
            raise SpecchatError("the target is not loaded")
        if op == "decode":
            rows = ctx.decode(args[0], all_logits=args[1])
            if self.shared is not None and rows.shape[0] <= self.shared.shape[0]:
                self.shared[: rows.shape[0]] = rows
                return rows.shape[0], None, ctx.tried
            return rows.shape[0], rows.tobytes(), ctx.tried
        if op == "share":
            self.shared = np.memmap(args[0], dtype=np.float32, mode="r+", shape=(args[1], ctx.n_vocab))
            return None
        if op == "extend_to":
            return ctx.extend_to(args[0])
        if op == "truncate":
            return ctx.truncate(args[0])
        if op == "checkpoint":
            return ctx.checkpoint(args[0])
        if op == "prepare_rollback":
            return ctx.prepare_rollback(args[0])
        if op == "perf":
            return ctx.perf()
        if op == "perf_reset":
            return ctx.perf_reset()
        raise SpecchatError(f"unknown request {op!r}")

    def probe(self, servers: tuple[str, ...]) -> list[ServerReport]:
        if not has_rpc():
            raise SpecchatError(f"this llama.cpp build has no RPC backend; {RPC_BUILD_HINT}")
        reports = []
        for server in servers:
            try:
                devices = tuple(describe(s, d) for s, d in add_servers((server,)))
                reports.append(ServerReport(server, devices))
            except SpecchatError as exc:
                reports.append(ServerReport(server, error=str(exc)))
        return reports

    def load(
        self,
        *,
        path: str,
        servers: tuple[str, ...],
        n_gpu_layers: int,
        local: list[str] | None,
        n_ctx: int,
        n_threads: int | None,
        rollback: int,
    ) -> dict[str, Any]:
        if servers and not has_rpc():
            raise SpecchatError(f"this llama.cpp build has no RPC backend; {RPC_BUILD_HINT}")
        remote = add_servers(servers) if servers else []
        # Without servers (measuring the process boundary) llama.cpp places layers as it would in the app.
        devices = [dev for _, dev in remote] + local_devices(local) if servers else None
        self.log.buffers.clear()
        self.model = Model(path, n_gpu_layers=n_gpu_layers, devices=devices)
        self.ctx = Context(self.model, n_ctx=n_ctx, n_threads=n_threads, rollback=rollback)
        return {
            "n_ctx": self.ctx.n_ctx,
            "n_batch": self.ctx.n_batch,
            "n_vocab": self.ctx.n_vocab,
            "rollback_depth": self.ctx.rollback_depth,
            "n_layers": self.model.n_layers,
            "kind": self.ctx.kind.value,
            "devices": [describe(s, d) for s, d in remote],
            "buffers": list(self.log.buffers),
        }


def _orphan_watch(parent: int) -> None:
    """End this process when the app is gone, even while llama.cpp waits on a stopped server."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until the app closes the pipe or says ``close``."""
    worker = Worker()
    while True:
        request = pipe.read_message(inp)
        if request is None or request[0] == "close":
            return
        op, cut, args = request[0], request[1], tuple(request[2:])
        started = time.perf_counter()
        try:
            if cut is not None and worker.ctx is not None:
                worker.ctx.truncate(cut)
            reply: tuple[Any, ...] = ("ok", worker.handle(op, args), worker.n_past)
        except SpecchatError as exc:
            reply = ("err", str(exc), worker.n_past)
        except Exception as exc:  # noqa: BLE001 - reported as one line to the app, which owns the log
            reply = ("err", f"{type(exc).__name__}: {exc}", worker.n_past)
        pipe.write_message(out, (*reply, time.perf_counter() - started))


def main() -> None:
    # The protocol gets the real standard output; anything printed (llama.cpp's own printf) goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    threading.Thread(target=_orphan_watch, args=(os.getppid(),), daemon=True).start()
    serve(sys.stdin.buffer, out)
    os._exit(0)  # skip llama.cpp's teardown: the app may already have moved on


if __name__ == "__main__":
    main()
