"""The n-gram (prompt lookup) drafter."""

from __future__ import annotations

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.drafters import NgramDrafter, lookup_continuation
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
