"""``specchat serve-rpc``: expose this machine's devices to other specchat instances (llama.cpp's RPC server)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from specchat.core.remote import DEFAULT_PORT, is_loopback, parse_server
from specchat.core.types import SpecchatError

SECURITY_WARNING = (
    "specchat: warning: the RPC protocol has no authentication and no encryption: anyone who can reach "
    "{endpoint} can run code on this machine's devices and read what they hold; use it on a trusted network only"
)


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("serve-rpc", help="lend this machine's devices to specchat on other machines (RPC)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every network)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for a CPU device")
    parser.add_argument(
        "--device",
        action="append",
        default=None,
        help="device to expose, by name as 'specchat info' lists it (repeatable; default: "
        "the GPUs, or the CPU without one)",
    )
    parser.set_defaults(func=cmd_serve_rpc)


def cmd_serve_rpc(args: argparse.Namespace) -> int:
    from specchat.cli.chat import check_threads
    from specchat.core.runtime.remote import check_can_listen, listen_address, serve, serving_devices

    endpoint = parse_server(f"{args.host}:{args.port}")
    check_threads(args.threads)
    names = [d for item in args.device for d in item.split(",") if d] if args.device else None
    # Everything that can fail is checked before "serving" is printed: the name, the devices, the port.
    address = listen_address(args.host)
    devices = serving_devices(names)
    check_can_listen(address, args.port)
    if address != args.host:
        endpoint += f" ({address})"
    if not is_loopback(address):
        print(SECURITY_WARNING.format(endpoint=endpoint), file=sys.stderr)
    failed: list[BaseException] = []
    stop = threading.Event()

    def run() -> None:
        try:
            serve(address, args.port, devices, threads=args.threads)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which reports it
            failed.append(exc)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server = threading.Thread(target=run, daemon=True)
    server.start()
    if _listening(address, args.port, stop):  # said once it is true: a client may connect from now on
        print(f"specchat: serving at {endpoint}; Ctrl-C stops", file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    if failed:
        raise failed[0]
    if not server.is_alive():
        raise SpecchatError(f"the RPC server at {endpoint} could not start")
    sys.stdout.flush()
    print("specchat: serve-rpc stopped", file=sys.stderr, flush=True)
    os._exit(0)  # llama.cpp's server thread cannot be joined; leave without tearing it down


def _listening(address: str, port: int, stop: threading.Event) -> bool:
    """Wait until the server accepts a connection at ``address:port``; False if ``stop`` came first."""
    import socket

    host = "127.0.0.1" if address == "0.0.0.0" else address
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            stop.wait(0.1)
    return False
