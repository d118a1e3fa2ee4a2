"""``openai`` clients for a test server, closed when the test ends (an unclosed one leaks its sockets)."""

from __future__ import annotations

from typing import Any, Protocol

import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageFunctionToolCall
from pydantic import BaseModel

OPEN: list[openai.OpenAI] = []


class Served(Protocol):
    """A server under test: where its API answers (``http://127.0.0.1:PORT/v1``)."""

    @property
    def base_url(self) -> str: ...


def client(served: Served, key: str = "none") -> openai.OpenAI:
    """A client of ``served`` that never retries; closed by ``close_all``."""
    api = openai.OpenAI(base_url=served.base_url, api_key=key, max_retries=0)
    OPEN.append(api)
    return api


def close_all() -> None:
    while OPEN:
        OPEN.pop().close()


def extra(reply: BaseModel) -> dict[str, Any]:
    """The fields of ``reply`` beyond OpenAI's schema (``model_extra``: ``speculative``, ``specchat``, ...)."""
    fields = reply.model_extra
    assert fields is not None, reply
    return fields


def usage_of(reply: Any) -> CompletionUsage:
    """The ``usage`` of a completion (or of the last chunk of a stream), which must be there."""
    usage = reply.usage
    assert isinstance(usage, CompletionUsage), reply
    return usage


def cached_tokens(reply: Any) -> int:
    """The prompt tokens ``reply`` found cached (``usage.prompt_tokens_details.cached_tokens``), which the server
    always reports."""
    details = usage_of(reply).prompt_tokens_details
    assert details is not None and details.cached_tokens is not None, reply
    return details.cached_tokens


def function_calls(message: ChatCompletionMessage) -> list[ChatCompletionMessageFunctionToolCall]:
    """The tool calls of ``message``, which must be there and all be function calls."""
    calls = message.tool_calls
    assert calls, message
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls), calls
    return [c for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]


def error_body(error: openai.APIStatusError) -> dict[str, Any]:
    """The JSON body of an error reply (an OpenAI-shaped ``error`` object)."""
    body = error.body
    assert isinstance(body, dict), body
    return body
