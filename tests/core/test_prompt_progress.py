"""A long prompt is read in steps that report how far they got, and Stop ends the reading between steps."""

from __future__ import annotations

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import PROMPT_STEP
from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationParams, SamplerParams, Verified
from support.events import finished

pytestmark = pytest.mark.slow

LONG = "Summarise this. " + " ".join(f"Item {i} is a small red box." for i in range(110))
PARAMS = GenerationParams(sampler=SamplerParams(temperature=0.0), max_tokens=4)


def test_a_long_prompt_reports_each_step_and_the_reply_follows(demo_runtime) -> None:
    steps: list[tuple[int, int]] = []
    session = Conversation(demo_runtime)
    events = list(
        session.reply(
            LONG, PARAMS, drafter=DrafterKind.DRAFT_MODEL, progress=lambda done, total: steps.append((done, total))
        )
    )
    total = steps[-1][1]
    assert total > 2 * PROMPT_STEP and steps[-1][0] == total and steps[0][0] < PROMPT_STEP
    assert all(b[0] - a[0] <= PROMPT_STEP and b[0] > a[0] for a, b in zip(steps, steps[1:], strict=False))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason is FinishReason.MAX_TOKENS
    assert any(isinstance(e, Verified) for e in events)
    assert finished.stats.reused_prompt_tokens == steps[0][0] and finished.stats.prompt_seconds > 0
    # The same prompt again: in the cache already, nothing to read in steps.
    steps.clear()
    session.truncate_messages(0)
    list(
        session.reply(
            LONG, PARAMS, drafter=DrafterKind.DRAFT_MODEL, progress=lambda done, total: steps.append((done, total))
        )
    )
    assert steps == []


def test_stop_ends_the_reading_between_steps(demo_runtime) -> None:
    cancel = CancelToken()
    steps: list[int] = []

    def progress(done: int, total: int) -> None:
        steps.append(done)
        if len(steps) == 2:
            cancel.cancel()

    session = Conversation(demo_runtime)
    session.runtime.empty_caches()
    events = list(session.reply(LONG, PARAMS, drafter=DrafterKind.DRAFT_MODEL, cancel=cancel, progress=progress))
    assert len(steps) == 2 and [type(e) for e in events] == [Finished]
    assert (
        finished(events, 0).reason is FinishReason.CANCELLED
        and finished(events, 0).message == "stopped while reading the prompt"
    )
    # The next reply reads on from where the reading stopped.
    steps.clear()
    session.truncate_messages(0)
    events = list(session.reply(LONG, PARAMS, drafter=DrafterKind.DRAFT_MODEL, progress=lambda d, t: steps.append(d)))
    assert finished(events).reason is FinishReason.MAX_TOKENS
