"""Prompt lookup: n-gram matches in the committed text propose what followed them."""

from __future__ import annotations

import time

import numpy as np

from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest
from specchat.core.engine.lookup import lookup_with_texts
from specchat.core.engine.sampling import Distribution
from specchat.core.types import DrafterKind, DraftSource, SpecchatError


class NgramDrafter(Drafter):
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and propose what followed.

    It looks in the whole committed sequence each round, so it needs no prefill, and in the reply's texts
    (:attr:`DraftRequest.texts`: attachments, a prediction), the longest match winning.
    """

    kind = DrafterKind.NGRAM
    source = DraftSource.LOOKUP

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise SpecchatError(f"bad n-gram range {min_ngram}..{max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def draft(self, request: DraftRequest) -> Draft:
        out = Draft()
        if request.k <= 0:
            return out
        started = time.perf_counter()
        seq = np.asarray(request.tokens, dtype=np.int64)
        proposal, n, origin = lookup_with_texts(seq, request.k, self.max_ngram, self.min_ngram, request.texts)
        out.tokens = proposal
        out.q = [Distribution.one_hot(t) for t in proposal]
        out.probs = [1.0] * len(proposal)
        out.sources = [DraftSource.LOOKUP] * len(proposal)
        out.match_lengths = [n] * len(proposal)
        out.origins = [origin] * len(proposal)
        out.step_seconds = (time.perf_counter() - started) / max(1, len(proposal))
        return out
