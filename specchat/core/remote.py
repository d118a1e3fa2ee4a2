"""Remote devices (llama.cpp's RPC backend) as plain data: server lists, what servers report, the saved list.

Nothing here imports llama.cpp (or anything above this module), so the
terminal and the window can parse and show server lists, and the llama side
(:mod:`specchat.core.llama.rpc`) shares these types. Talking to servers
(probes, serving, the build check) is the runtime's:
:mod:`specchat.core.runtime.remote`; the window's saved list is in
settings.json (:func:`specchat.core.settings.load_servers`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from specchat.core.build import GIB
from specchat.core.types import SpecchatError

DEFAULT_PORT = 50052
MAX_SERVERS = 16  # GGML_RPC_MAX_SERVERS
TARGET_WORKER_FLAG = "--specchat-target-worker"
"""The packaged app's executable runs the target's child process (it has no ``python -m``) when given only this."""
DEFAULT_DEADLINE = 60.0
"""Seconds one call to the target's process may take before its server counts as stopped."""

RPC_BUILD_HINT = (
    'reinstall llama-cpp-python with RPC: CMAKE_ARGS="-DGGML_RPC=on" pip install --no-cache-dir '
    "--force-reinstall llama-cpp-python (see the README)"
)
"""How to get a build with the RPC backend, for the one-line error without it."""

_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


class RemoteError(SpecchatError):
    """A remote server could not be reached, went away, or stopped answering."""


def parse_server(text: str) -> str:
    """``HOST:PORT`` checked and normalised; one-line SpecchatError otherwise."""
    item = text.strip()
    host, sep, port = item.rpartition(":")
    if not sep or not host or not port:
        raise SpecchatError(f"remote server '{item}' is not HOST:PORT (for example 192.168.1.20:{DEFAULT_PORT})")
    if ":" in host or "[" in host:
        raise SpecchatError(f"remote server '{item}': IPv6 addresses are not supported by llama.cpp's RPC client")
    if not _HOST.match(host):
        raise SpecchatError(f"remote server '{item}': '{host}' is not a host name or IPv4 address")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise SpecchatError(f"remote server '{item}': the port must be a number from 1 to 65535")
    return f"{host}:{int(port)}"


def parse_servers(text: str | Iterable[str]) -> tuple[str, ...]:
    """``HOST:PORT[,HOST:PORT...]`` (or a list of them) as a tuple without duplicates; one-line errors."""
    items = text.split(",") if isinstance(text, str) else list(text)
    servers: list[str] = []
    for item in items:
        server = parse_server(item)
        if server not in servers:
            servers.append(server)
    if not servers:
        raise SpecchatError(f"no remote server given (HOST:PORT, for example 127.0.0.1:{DEFAULT_PORT})")
    if len(servers) > MAX_SERVERS:
        raise SpecchatError(f"at most {MAX_SERVERS} remote servers, got {len(servers)}")
    return tuple(servers)


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps a server on this machine."""
    return host == "localhost" or host.startswith("127.") or host == "::1"


@dataclass(frozen=True)
class RemoteDevice:
    """One device a server exposes: its memory is the remote machine's (RAM for a CPU server)."""

    server: str
    name: str  # the local name llama.cpp gives it, e.g. "RPC0"
    free_bytes: int
    total_bytes: int

    def summary(self) -> str:
        return f"{self.name} at {self.server}: {self.free_bytes / GIB:.1f}/{self.total_bytes / GIB:.1f} GiB free"

    def to_json(self) -> dict[str, object]:
        return {
            "server": self.server,
            "name": self.name,
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
        }


@dataclass(frozen=True)
class ServerReport:
    """What probing one server found: its devices, or why none."""

    server: str
    devices: tuple[RemoteDevice, ...] = ()
    error: str = ""

    def lines(self) -> list[str]:
        if self.error:
            return [f"{self.server}: {self.error}"]
        return [d.summary() for d in self.devices]
