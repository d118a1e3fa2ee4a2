"""``openai`` clients for a test server, closed when the test ends (an unclosed one leaks its sockets)."""

from __future__ import annotations

import openai

OPEN: list[openai.OpenAI] = []


def client(served: object, key: str = "none") -> openai.OpenAI:
    """A client of ``served`` (anything with ``base_url``) that never retries; closed by ``close_all``."""
    api = openai.OpenAI(base_url=served.base_url, api_key=key, max_retries=0)  # type: ignore[attr-defined]
    OPEN.append(api)
    return api


def close_all() -> None:
    while OPEN:
        OPEN.pop().close()
