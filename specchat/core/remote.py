"""Remote devices through llama.cpp's RPC backend, as plain data: server lists and what servers report.

Nothing here imports llama.cpp, so the terminal and the window can parse
and show server lists; :mod:`specchat.core.distributed` talks to servers,
from a child process (:mod:`specchat.core.llama.remote_target`), because
ggml aborts the whole process when a server is unreachable or goes away.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from specchat.core.build import GIB
from specchat.core.jsonfile import UnreadableFileError, read_json
from specchat.core.types import SpecchatError

log = logging.getLogger(__name__)

DEFAULT_PORT = 50052
MAX_SERVERS = 16  # GGML_RPC_MAX_SERVERS
DEFAULT_DEADLINE = 60.0
"""Seconds one call to the target's process may take before its server counts as stopped."""

RPC_BUILD_HINT = (
    'reinstall llama-cpp-python with RPC: CMAKE_ARGS="-DGGML_RPC=on" pip install --no-cache-dir '
    "--force-reinstall llama-cpp-python (see the README)")
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
        return {"server": self.server, "name": self.name, "free_bytes": self.free_bytes,
                "total_bytes": self.total_bytes}


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


SERVERS_FILENAME = "remote-devices.json"


def servers_path() -> Path:
    """Where the window keeps its list of remote servers (beside settings.json)."""
    from specchat.core import paths

    return paths.config_dir() / SERVERS_FILENAME


def load_servers(path: Path | None = None) -> tuple[str, ...]:
    """The saved servers; an unreadable file or entry is skipped (logged), never fatal."""
    path = path or servers_path()
    try:
        raw = read_json(path)
    except FileNotFoundError:
        return ()
    except UnreadableFileError as exc:
        log.warning("remote servers file unreadable: %s; using none", exc)
        return ()
    items = raw.get("servers", []) if isinstance(raw, dict) else []
    servers: list[str] = []
    for item in items if isinstance(items, list) else []:
        try:
            servers.extend(s for s in parse_servers(str(item)) if s not in servers)
        except SpecchatError as exc:
            log.warning("remote servers file %s: %s; skipped", path, exc)
    return tuple(servers[:MAX_SERVERS])


def save_servers(servers: Iterable[str], path: Path | None = None, *, free: dict[str, int] | None = None) -> None:
    """Write the list atomically (a crash leaves the old file or the new one).

    ``free`` adds what a Test found free on each server (bytes); figures for
    servers still listed are kept from before.
    """
    path = path or servers_path()
    servers = list(servers)
    known = {s: n for s, n in saved_free(path).items() if s in servers}
    known.update({s: int(n) for s, n in (free or {}).items() if s in servers})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"servers": servers, "free_bytes": known}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def saved_free(path: Path | None = None) -> dict[str, int]:
    """Free bytes per server as the latest Test found them (for the fit verdict before loading)."""
    try:
        raw = read_json(path or servers_path())
    except (FileNotFoundError, UnreadableFileError):
        return {}
    found = raw.get("free_bytes", {}) if isinstance(raw, dict) else {}
    if not isinstance(found, dict):
        return {}
    return {str(s): int(n) for s, n in found.items() if isinstance(n, int) and not isinstance(n, bool) and n >= 0}
