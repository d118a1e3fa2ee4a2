"""Talking to remote devices for the front ends: build check, probes, serving this machine's devices.

Probes run in child processes (:mod:`specchat.core.llama.rpc.target`), so an
unreachable or broken server is an error line, never an abort of this
process; :func:`serve` runs a server here. The plain data (server lists,
reports, the saved list) is :mod:`specchat.core.remote`.
"""

from __future__ import annotations

from collections.abc import Iterable

from specchat.core.remote import RPC_BUILD_HINT, ServerReport
from specchat.core.types import SpecchatError


def probe_servers(servers: Iterable[str], *, timeout: float = 10.0) -> list[ServerReport]:
    """Connect to each server from a child process and list its devices (never aborts this process)."""
    from specchat.core.llama.rpc.target import probe

    return probe(tuple(servers), timeout=timeout)


def rpc_available() -> bool:
    """Whether this llama-cpp-python build has the RPC backend."""
    from specchat.core.llama.rpc.binding import has_rpc

    return has_rpc()


def require_rpc() -> None:
    """One-line error saying how to get RPC, unless this build has it."""
    if not rpc_available():
        raise SpecchatError(f"this llama.cpp build has no RPC backend for remote devices; {RPC_BUILD_HINT}")


def listen_address(host: str) -> str:
    """The IPv4 address ``host`` names: ggml's server takes only a dotted address (it uses ``inet_addr``)."""
    import ipaddress
    import socket

    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise SpecchatError(f"cannot listen at {host}: the name does not resolve to an IPv4 address ({why})") from None
    return str(found[0][4][0])


def check_can_listen(host: str, port: int) -> None:
    """One-line error unless a server could listen at ``host:port`` now."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        raise SpecchatError(f"cannot listen at {host}:{port}: {exc.strerror or exc}") from None


def serving_devices(names: list[str] | None) -> list[int]:
    """The devices to serve: ``names`` as 'specchat info' lists them (one-line error for an unknown one), or
    by default the GPUs, else the CPU."""
    from specchat.core.llama.rpc.binding import cpu_device, local_devices

    require_rpc()
    return local_devices(names) if names else (local_devices() or [cpu_device()])


def serve(address: str, port: int, devices: list[int], *, threads: int | None = None) -> None:
    """Expose ``devices`` (from :func:`serving_devices`) at ``address:port`` (IPv4) until the process ends.

    Blocks in llama.cpp; returns only if the server could not start.
    """
    from specchat.core.llama.rpc.binding import start_server
    from specchat.core.llama.threads import default_threads

    start_server(f"{address}:{port}", devices, threads or default_threads())
