"""The target's context in a child process, so that a lost remote server never takes the app down.

ggml aborts the process that talks to a server which goes away (and waits
forever on one that stops), so the target's context runs in
:mod:`specchat.core.llama.rpc.worker`; :class:`RemoteTarget` drives it
over a pipe and implements the engine's ``TargetContext``, so the
speculative loop does not know the difference. The draft and the window
stay in this process.

Each call has a deadline (the watchdog): past it, or when the child dies,
the child is killed and the call raises one line naming the server. The
conversation lives in the app, so nothing committed is lost; the next
reply starts a new child (reconnecting) or the user loads the pair locally.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specchat.core.llama.context import PerfCounters
from specchat.core.llama.rpc.pipe import PipeTimeoutError, Reader, write_message
from specchat.core.remote import DEFAULT_DEADLINE, TARGET_WORKER_FLAG, RemoteDevice, RemoteError, ServerReport
from specchat.core.types import MAX_DEPTH, SpecchatError

LOAD_DEADLINE = 1800.0
"""Seconds a load may take: a large target's weights travel to the servers once."""
PROBE_TIMEOUT = 5.0
"""Seconds a server checked after a lost call has to answer a probe of its own."""
STOP_GRACE = 2.0
"""Seconds a call keeps waiting after Stop before the child is killed (a normal verify pass ends sooner)."""


def _command() -> list[str]:
    if getattr(sys, "frozen", False):  # the packaged app: its executable starts the worker on this flag
        return [sys.executable, TARGET_WORKER_FLAG]
    return [sys.executable, "-m", "specchat.core.llama.rpc.worker"]


def _spawn() -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[4])  # the folder holding the specchat package
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # The child mostly waits for the servers: threads spinning there would take CPU from the draft (and from
    # servers on this machine) for nothing.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    stderr = None if env.get("SPECCHAT_LLAMA_LOG") else subprocess.DEVNULL  # ggml's abort text is not for users
    # A session of its own: Ctrl-C in a terminal reaches the app (which stops the reply), not the child.
    return subprocess.Popen(
        _command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, start_new_session=True
    )


class _Child:
    """One worker process and its pipe."""

    def __init__(self) -> None:
        self.proc = _spawn()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.reader = Reader(self.proc.stdout.fileno())

    def call(
        self, message: tuple[Any, ...], deadline: float, keep_waiting: Callable[[], bool] | None = None
    ) -> tuple[Any, ...] | None:
        """The reply; None if the child died; PipeTimeoutError past the deadline."""
        assert self.proc.stdin is not None
        try:
            write_message(self.proc.stdin, message)  # type: ignore[arg-type]
        except (BrokenPipeError, OSError):
            return None
        return self.reader.read(time.monotonic() + deadline, keep_waiting=keep_waiting)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def close(self) -> None:
        """Ask the child to leave, then make sure it did."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                write_message(self.proc.stdin, ("close",))  # type: ignore[arg-type]
                self.proc.wait(timeout=2.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


def probe(servers: tuple[str, ...], *, timeout: float = 10.0) -> list[ServerReport]:
    """Each server's devices, each probed by a child of its own (in parallel), so none can abort this process."""
    reports: dict[str, ServerReport] = {}

    def one(server: str) -> None:
        child = _Child()
        try:
            reply = child.call(("probe", None, (server,)), timeout)
            if reply is None:
                reports[server] = ServerReport(
                    server,
                    error=f"the remote server at {server} is not a llama.cpp RPC "
                    "server of this version (the handshake failed)",
                )
            elif reply[0] == "err":
                reports[server] = ServerReport(server, error=str(reply[1]))
            else:
                reports[server] = reply[1][0]
        except PipeTimeoutError:
            reports[server] = ServerReport(
                server,
                error=f"the remote server at {server} did not answer within "
                f"{timeout:g} s (stopped, or serving another client)",
            )
        finally:
            child.kill()

    threads = [threading.Thread(target=one, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [reports[s] for s in servers]


class _LostError(RemoteError):
    """The target's process died or stopped answering (the message says whose fault it was)."""


def _servers(servers: Sequence[str]) -> str:
    """ "the remote server at HOST:PORT" (or servers, or the target's process without any)."""
    if not servers:
        return "the target's process"
    return f"the remote {'server' if len(servers) == 1 else 'servers'} at {', '.join(servers)}"


def _still_answer(servers: Sequence[str]) -> str:
    if not servers:
        return ""
    return f"; {_servers(servers)} still {'answers' if len(servers) == 1 else 'answer'}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _refuses(server: str) -> bool:
    host, _, port = server.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2.0):
            return False
    except OSError:
        return True


class RemoteTarget:
    """The target's context, running in a child process on remote (and local) devices.

    Implements ``TargetContext``; ``tokens`` mirrors what the child's context holds.
    """

    def __init__(
        self,
        servers: tuple[str, ...],
        *,
        deadline: float = DEFAULT_DEADLINE,
        keep_waiting: Callable[[], bool] | None = None,
    ) -> None:
        if deadline <= 0:
            raise SpecchatError(f"the remote deadline must be positive, got {deadline:g} s")
        self.servers = servers
        self.deadline = deadline
        self.tokens: list[int] = []
        self.devices: list[RemoteDevice] = []
        self.info: dict[str, Any] = {}
        self.keep_waiting = keep_waiting  # False once Stop (or a load's Cancel) is pressed; set per reply
        self.round_trips = 0
        self.tried = False  # the latest decode ran on a thread count the child's tuner was trying (Context.tried)
        self.last_overhead = 0.0  # seconds the latest request spent outside the child's work: the pipe's cost
        self._load_args: dict[str, Any] | None = None
        self._child: _Child | None = None
        self._stop_seen: float | None = None
        self._cut: int | None = None  # a truncation not yet sent: it rides on the next request
        self._shared: np.memmap | None = None  # logits rows written by the child
        self._connect()

    # --- the child's life -------------------------------------------------
    def _connect(self) -> None:
        self._child = _Child()
        if self.servers:
            try:
                reports = self._request(("probe", self.servers), max(self.deadline, 10.0), blame=False)
            except _LostError as lost:  # one bad server took the child down: each probed alone says which and why
                errors = [r.error for r in probe(self.servers, timeout=min(self.deadline, 10.0)) if r.error]
                raise RemoteError("; ".join(errors) if errors else str(lost)) from None
            errors = [r.error for r in reports if r.error]
            if errors:
                self._drop()
                raise RemoteError(errors[0])
            self.devices = [d for r in reports for d in r.devices]

    def load(
        self,
        path: str | Path,
        *,
        n_gpu_layers: int = -1,
        local: list[str] | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        rollback: int = 0,
    ) -> None:
        """Load the target on the servers' devices (and ``local`` ones, or every local GPU)."""
        self._load_args = {
            "path": str(path),
            "servers": self.servers,
            "n_gpu_layers": n_gpu_layers,
            "local": local,
            "n_ctx": n_ctx,
            "n_threads": n_threads,
            "rollback": rollback,
        }
        if self._child is None:
            self._connect()
        self._load()

    def _reconnect(self) -> None:
        assert self._load_args is not None
        self._connect()
        self._load()

    def _load(self) -> None:
        self.info = self._request(("load", self._load_args), LOAD_DEADLINE)
        self.tokens = []
        self._cut = None
        self._share_logits()

    def _share_logits(self) -> None:
        """A file both processes map: a verify pass's logits rows come back through it instead of the pipe."""
        rows, n_vocab = MAX_DEPTH + 1, self.n_vocab
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None  # memory, not disk, where Linux has it
        with tempfile.NamedTemporaryFile(prefix="specchat-logits-", dir=folder) as f:
            f.truncate(rows * n_vocab * 4)
            self._shared = np.memmap(f.name, dtype=np.float32, mode="r+", shape=(rows, n_vocab))
            self._request(("share", f.name, rows), self.deadline)
        # The file is gone now; both mappings stay until each side lets go (or dies).

    @property
    def pid(self) -> int | None:
        """The target's process, while it runs."""
        return self._child.proc.pid if self._child is not None else None

    @property
    def connected(self) -> bool:
        return self._child is not None

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None

    def kill(self) -> None:
        """End the child at once (quitting while a server does not answer)."""
        if self._child is not None:
            self._child.kill()
            self._child = None

    def _drop(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child = None
        self.tokens = []
        self._cut = None

    def _wait_ok(self) -> bool:
        """False once Stop has been pressed for longer than the grace period."""
        if self.keep_waiting is None or self.keep_waiting():
            self._stop_seen = None
            return True
        now = time.monotonic()
        if self._stop_seen is None:
            self._stop_seen = now
        return now - self._stop_seen < STOP_GRACE

    def _request(self, message: tuple[Any, ...], deadline: float, *, blame: bool = True) -> Any:
        """The child's answer to ``message``; a lost child raises _LostError, saying whose fault (``blame``)."""
        if self._child is None:
            raise RemoteError(f"the target's process is not running (servers {', '.join(self.servers)})")
        self._stop_seen = None
        message = (message[0], self._cut, *message[1:])
        self._cut = None
        started = time.perf_counter()
        child = self._child
        try:
            reply = child.call(message, deadline, self._wait_ok)
        except PipeTimeoutError:
            stopped = self._stop_seen is not None
            self._drop()
            if stopped:  # Stop pressed: no time spent finding out which server it was
                raise RemoteError(f"stopped waiting for {_servers(self.servers)}") from None
            raise (
                self._lost(child, deadline)
                if blame
                else _LostError(
                    f"the target's process gave no answer within {deadline:g} s from {_servers(self.servers)}"
                )
            ) from None
        self.round_trips += 1
        if reply is None:
            self._drop()
            raise (
                self._lost(child, None)
                if blame
                else _LostError(f"the target's process died talking to {_servers(self.servers)}")
            )
        status, value, n_past, worked = reply
        self.last_overhead = time.perf_counter() - started - worked
        del self.tokens[n_past:]
        if status == "err":
            raise SpecchatError(str(value))
        return value

    def _lost(self, child: _Child, deadline: float | None) -> _LostError:
        """The error for a child that died (``deadline`` None) or did not answer within ``deadline`` seconds.

        The servers are checked on their own (the child is gone, so they are free): those that refuse
        a connection (died) or do not answer a probe (stopped) are named; if every one is well, the
        target's process itself was killed or stopped, and that is said instead.
        """
        if deadline is None:
            culprits = [s for s in self.servers if _refuses(s)]
            if culprits:
                return _LostError(f"{_servers(culprits)} went away")
            code = child.proc.wait()
            if code == -signal.SIGABRT and self.servers:  # ggml gives up on a broken connection this way
                return _LostError(
                    f"the connection to {_servers(self.servers)} broke (the target's process "
                    f"aborted){_still_answer(self.servers)}"
                )
            how = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"
            return _LostError(f"the target's process (pid {child.proc.pid}) died ({how}){_still_answer(self.servers)}")
        culprits = [r.server for r in probe(self.servers, timeout=PROBE_TIMEOUT) if r.error] if self.servers else []
        if culprits:
            return _LostError(f"{_servers(culprits)} stopped answering (no reply within {deadline:g} s)")
        return _LostError(
            f"the target's process (pid {child.proc.pid}) stopped answering (no reply within "
            f"{deadline:g} s){_still_answer(self.servers)}"
        )

    # --- TargetContext ------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return int(self.info.get("n_ctx", 0))

    @property
    def n_batch(self) -> int:
        return int(self.info.get("n_batch", 0))

    @property
    def n_vocab(self) -> int:
        return int(self.info.get("n_vocab", 0))

    @property
    def rollback_depth(self) -> int:
        return int(self.info.get("rollback_depth", 0))

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def extend_to(self, tokens: Sequence[int]) -> int:
        """Hold exactly ``tokens``; the start of a reply, so a lost child is replaced (reconnecting) here."""
        if self._child is None:
            self._reconnect()
        want = [int(t) for t in tokens]
        reuse = int(self._request(("extend_to", want), self.deadline))
        self.tokens = want
        return reuse

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        want = [int(t) for t in tokens]
        n_rows, data, self.tried = self._request(("decode", want, all_logits), self.deadline)
        self.tokens.extend(want)
        if data is None:  # in the shared file: like llama.cpp's own logits, valid until the next decode
            assert self._shared is not None
            return np.asarray(self._shared[:n_rows])
        return np.frombuffer(bytearray(data), dtype=np.float32).reshape(n_rows, self.n_vocab)

    def truncate(self, n_keep: int) -> None:
        if n_keep >= len(self.tokens):
            return
        del self.tokens[n_keep:]
        if self._child is None:
            return
        if self.dense:
            self._cut = n_keep  # sent with the next request: a KV cache cut cannot fail
        else:
            self._request(("truncate", n_keep), self.deadline)

    @property
    def dense(self) -> bool:
        """Whether the target is attention only (its cuts, checkpoints and rollbacks need no state saved)."""
        return bool(self.info.get("kind", "dense") == "dense")

    def checkpoint(self, slot: str) -> None:
        if not self.dense:
            self._request(("checkpoint", slot), self.deadline)

    def prepare_rollback(self, depth: int) -> None:
        if not self.dense:
            self._request(("prepare_rollback", depth), self.deadline)

    def perf(self) -> PerfCounters:
        value = self._request(("perf",), self.deadline)
        assert isinstance(value, PerfCounters)
        return value

    def perf_reset(self) -> None:
        self._request(("perf_reset",), self.deadline)

    # --- the load report ------------------------------------------------------
    @property
    def buffers(self) -> list[tuple[str, str, float]]:
        """``(buffer type, "model" | "KV" | "compute", MiB)`` as llama.cpp reported the load."""
        return [(str(name), str(what), float(mib)) for name, what, mib in self.info.get("buffers", [])]

    def remote_mib(self) -> float:
        """MiB of the target's weights that llama.cpp put on remote devices."""
        return sum(mib for name, what, mib in self.buffers if what == "model" and name.startswith("RPC"))

    def placement(self) -> str:
        """Where the target runs, e.g. ``"RPC 513 MiB on 127.0.0.1:50052 + local 74 MiB"``."""
        remote = self.remote_mib()
        local = sum(mib for name, what, mib in self.buffers if what == "model" and not name.startswith("RPC"))
        if not self.servers:
            return "child process"
        where = ", ".join(self.servers)
        return f"remote {remote:.0f} MiB on {where}" + (f" + local {local:.0f} MiB" if local >= 1 else "")
