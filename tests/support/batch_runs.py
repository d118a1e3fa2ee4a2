"""Driving a batched runtime to its end in tests."""

from __future__ import annotations

from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import Finished, Verified


def run_all(batched: BatchedRuntime) -> dict[int, tuple[list[int], Finished]]:
    """Rounds until every sequence has ended: per key, its tokens and its Finished."""
    tokens: dict[int, list[int]] = {}
    ended: dict[int, Finished] = {}
    while batched.active:
        for key, event in batched.step():
            if isinstance(event, Verified):
                tokens.setdefault(key, []).extend(event.committed)
            elif isinstance(event, Finished):
                ended[key] = event
    return {key: (tokens.get(key, []), ended[key]) for key in ended}


def prompt_of(runtime: Runtime, question: str) -> list[int]:
    """The prompt of a conversation asking ``question`` on ``runtime``'s template."""
    return runtime.prompt([{"role": "user", "content": question}]).tokens
