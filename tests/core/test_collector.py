"""The cyclic collector is held off while GGUF headers are parsed, and comes back as it was."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from specchat.core.collector import collector_paused
from specchat.core.models.ggufmeta import read_gguf_info


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations of the collections that ran, as they run."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)


def test_reading_a_vocabulary_runs_no_collection_and_leaves_the_collector_on(demo_pair, collections) -> None:
    assert gc.isenabled()
    info = read_gguf_info(demo_pair.target, with_vocab=True)
    assert info.vocab is not None and len(info.vocab.tokens) == 49152
    # A read makes enough objects for hundreds of collections (5 full ones) where they may run; at most the one
    # young collection the first allocation after the pause owes runs.
    assert len(collections) <= 1 and 2 not in collections, collections
    assert gc.isenabled()


def test_nested_and_overlapping_pauses_end_with_the_last() -> None:
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert inside.wait(10)
        with collector_paused():
            assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's pause still holds
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
