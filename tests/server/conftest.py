"""A real server on 127.0.0.1 (uvicorn in a thread, a free port) over the session's demo runtime."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from specchat.server.app import ServerConfig, build_app
from specchat.server.request_queue import RequestQueue
from specchat.server.runner import ServerThread
from support.api_clients import close_all

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import Runtime


@dataclass
class Served:
    url: str
    host: RequestQueue
    config: ServerConfig

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


@contextmanager
def serving(runtime: Runtime, config: ServerConfig | None = None, queue_size: int = 8) -> Iterator[Served]:
    config = config or ServerConfig()
    host = RequestQueue(runtime, queue_size=queue_size)
    thread = ServerThread(build_app(host, config)).start()
    try:
        yield Served(thread.url, host, config)
    finally:
        thread.stop()
        host.close()


@pytest.fixture(scope="module")
def served(demo_runtime) -> Iterator[Served]:
    with serving(demo_runtime) as s:
        yield s


@pytest.fixture
def serve(demo_runtime) -> Callable[..., object]:
    """``with serve(config, queue_size) as s``: a server of the test's own."""
    return lambda config=None, queue_size=8: serving(demo_runtime, config, queue_size)


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    close_all()
