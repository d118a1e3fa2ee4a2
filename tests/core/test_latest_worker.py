"""The latest-request-only thread: a burst of requests is one answer, for the last of them."""

from __future__ import annotations

import queue
import threading

import pytest

from specchat.core.latest_worker import LatestWorker

WAIT_S = 30.0  # generous: the machine may be busy; nothing here is timed


class Gated:
    """``work`` that records each request and blocks on the first until ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.seen: list[str] = []

    def __call__(self, request: str) -> str:
        self.seen.append(request)
        self.started.set()
        assert self.gate.wait(WAIT_S)
        if request == "boom":
            raise ValueError("a bad request")
        return request.upper()


def test_a_burst_while_busy_is_answered_once_for_the_last_request() -> None:
    work, answers = Gated(), queue.Queue[tuple[int, str]]()
    worker = LatestWorker(work, lambda ticket, result: answers.put((ticket, result)), "test-latest")
    first = worker.submit("a")
    assert work.started.wait(WAIT_S)  # the thread is on "a"
    tickets = [worker.submit(name) for name in ("b", "c", "d", "e")]
    work.gate.set()
    assert answers.get(timeout=WAIT_S) == (tickets[-1], "E")  # "a" was superseded: its answer is dropped
    assert work.seen == ["a", "e"]  # b, c and d were replaced while waiting, never worked on
    assert first < tickets[0] < tickets[-1] == worker.latest
    assert worker.wait_idle(WAIT_S) and answers.empty()
    assert worker.stop(WAIT_S)


def test_a_dropped_request_is_not_delivered_and_a_failing_one_does_not_end_the_thread() -> None:
    work, answers = Gated(), queue.Queue[tuple[int, str]]()
    worker = LatestWorker(work, lambda ticket, result: answers.put((ticket, result)), "test-latest")
    worker.submit("boom")
    assert work.started.wait(WAIT_S)
    worker.drop()  # the asker went away while "boom" ran
    work.gate.set()
    ticket = worker.submit("next")
    assert answers.get(timeout=WAIT_S) == (ticket, "NEXT")
    assert work.seen == ["boom", "next"] and answers.empty()
    assert worker.stop(WAIT_S)


def test_stop_ends_the_thread_and_refuses_more() -> None:
    work, delivered = Gated(), []
    work.gate.set()
    worker = LatestWorker(work, lambda ticket, result: delivered.append(result), "test-latest")
    assert worker.stop(WAIT_S)  # never started: nothing to wait for
    with pytest.raises(RuntimeError, match="stopped"):
        worker.submit("late")
    assert delivered == [] and work.seen == []
