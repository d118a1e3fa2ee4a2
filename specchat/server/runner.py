"""Running the application on uvicorn: on this thread (``specchat serve``) or a background one (the window, tests)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette

from specchat.core.types import SpecchatError


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: a free port); a one-line error when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise SpecchatError(f"cannot bind to {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise SpecchatError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def make_server(app: Starlette, log_level: str = "warning") -> uvicorn.Server:
    # h11, not httptools: one pure-Python HTTP stack everywhere; no access log unless asked for.
    config = uvicorn.Config(app, http="h11", lifespan="off", log_level=log_level, access_log=log_level == "info",
                            timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


class ServerThread:
    """The application on uvicorn in a daemon thread; ``url`` once started, ``stop()`` to end it."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.sock = bind(host, port)
        self.url = url_of(self.sock)
        self.server = make_server(app, log_level)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="specchat-serve-http", daemon=True)

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise SpecchatError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()
