"""Running the application on uvicorn: on this thread (``specchat serve``) or a background one (the window, tests).

Stopping (a signal, ``ServerThread.stop``) first ends the application's open
requests (``Api.stop``: streams get an error event and ``[DONE]``, waiting
requests a 503), then lets uvicorn close the connections. A signal is handled
here: uvicorn's habit of raising it again once it has stopped (a
KeyboardInterrupt traceback in the middle of the caller's cleanup) is left out.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from types import FrameType

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


GRACE_SECONDS = 5.0  # for a client that does not read its last bytes when the server stops
HEAD_LIMIT = 16 << 10  # the HTTP parser's cap on a request line and headers: over it, uvicorn's 400 and a close


class Server(uvicorn.Server):
    """uvicorn's server, which ends the application's open requests (``on_stop``) before its connections."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[float], Awaitable[None]] | None = None) -> None:
        super().__init__(config)
        self.on_stop = on_stop

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # As uvicorn's, without recording the signal to raise it again after the shutdown.
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_stop is not None:
            await self.on_stop(GRACE_SECONDS)
        await super().shutdown(sockets)


class _CutOff(logging.Filter):
    """uvicorn's "Exception in ASGI application" for a request cancelled as the server stops (a client that
    did not read, a second Ctrl-C): one line, not a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            record.msg, record.args = "a request was cut off as the server stopped", ()
            record.exc_info = record.exc_text = None
        return True


def make_server(app: Starlette, log_level: str = "warning") -> Server:
    # h11, not httptools: one pure-Python HTTP stack everywhere; no access log unless asked for.
    config = uvicorn.Config(
        app,
        http="h11",
        lifespan="off",
        log_level=log_level,
        access_log=log_level == "info",
        timeout_graceful_shutdown=int(GRACE_SECONDS),
        h11_max_incomplete_event_size=HEAD_LIMIT,
    )
    errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _CutOff) for f in errors.filters):
        errors.addFilter(_CutOff())
    return Server(config, on_stop=getattr(app.state, "stop", None))


class ServerThread:
    """The application on uvicorn in a daemon thread; ``url`` once started, ``stop()`` to end it."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.sock = bind(host, port)
        self.url = url_of(self.sock)
        self.server = make_server(app, log_level)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="specchat-serve-http", daemon=True
        )

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
