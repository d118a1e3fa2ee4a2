"""The drafters: n-gram prompt lookup, and the draft model's timing report."""

from __future__ import annotations

import time

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.drafters import DraftModelDrafter, NgramDrafter, lookup_continuation
from specchat.core.types import SamplerParams


def test_lookup_finds_the_latest_match_of_the_longest_ngram() -> None:
    seq = np.array([1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3])
    # "1 2 3" occurred twice before; the latest is followed by 4 5 6.
    assert lookup_continuation(seq, 3, max_ngram=3, min_ngram=1) == [4, 5, 6]
    assert lookup_continuation(seq, 10, 3, 1) == [4, 5, 6, 7, 1, 2, 3]


def test_lookup_falls_back_to_shorter_ngrams_and_may_find_nothing() -> None:
    assert lookup_continuation(np.array([5, 8, 1, 2, 8]), 2, 3, 1) == [1, 2]
    assert lookup_continuation(np.array([1, 2, 3, 4]), 4, 3, 1) == []
    assert lookup_continuation(np.array([7]), 4, 3, 1) == []


def test_ngram_drafter_proposes_one_hot_drafts() -> None:
    draft = NgramDrafter().draft([1, 2, 3, 4, 1, 2], 2, SamplerParams(), np.random.default_rng(0), CancelToken())
    assert draft.tokens == [3, 4]
    assert [q.prob(t) for q, t in zip(draft.q, draft.tokens)] == [1.0, 1.0]


class SlowContext:
    """A stand-in draft context: 4-token vocabulary, a catch-up and decodes of known duration."""

    n_ctx = 64

    def __init__(self, sync_pause: float, decode_pause: float) -> None:
        self.sync_pause, self.decode_pause = sync_pause, decode_pause

    def sync(self, tokens: list[int]) -> tuple[np.ndarray, int]:
        time.sleep(self.sync_pause)
        return np.array([0.0, 3.0, 1.0, 0.5], dtype=np.float32), len(tokens) - 1

    def decode(self, tokens: list[int]) -> list[np.ndarray]:
        time.sleep(self.decode_pause)
        return [np.array([0.0, 3.0, 1.0, 0.5], dtype=np.float32)]


def test_draft_model_reports_catch_up_steps_and_sampling_apart() -> None:
    drafter = DraftModelDrafter(SlowContext(sync_pause=0.03, decode_pause=0.02))
    draft = drafter.draft([1, 2, 3], 4, SamplerParams(), np.random.default_rng(0), CancelToken())
    assert draft.tokens == [1, 1, 1, 1]
    assert draft.sync_seconds is not None and draft.sync_seconds >= 0.03
    assert draft.step_seconds is not None and draft.step_seconds >= 0.02  # 3 decodes after the catch-up
    assert draft.sample_seconds is not None and draft.sample_seconds < draft.step_seconds
    one = drafter.draft([1, 2, 3], 1, SamplerParams(), np.random.default_rng(0), CancelToken())
    assert one.step_seconds is None and one.sync_seconds is not None  # depth 1: a catch-up, no further step
