"""Prompt lookup: n-gram matches in the committed text propose what followed them."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from specchat.core.engine import lookup
from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest
from specchat.core.engine.lookup import find_break, find_match, lookup_with_texts, resume_copy
from specchat.core.engine.sampling import Distribution
from specchat.core.types import DrafterKind, DraftSource, SpecchatError


class NgramDrafter(Drafter):
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and propose what followed.

    It looks in the whole committed sequence each round, and in the reply's texts (:attr:`DraftRequest.texts`:
    attachments, a prediction), the longest match winning. Where the longest n-gram finds no match shortly
    after a copy (a match of :data:`~specchat.core.engine.lookup.RESUME_ALIGNED` tokens) that an edit broke
    off, the copy resumes next to where it broke off (:func:`~specchat.core.engine.lookup.resume_copy`, match
    length 0) instead of at one token's latest occurrence.
    """

    kind = DrafterKind.NGRAM
    source = DraftSource.LOOKUP

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise SpecchatError(f"bad n-gram range {min_ngram}..{max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._copied_at: int | None = None  # the text's length when its lookup last matched a copy

    def prefill(self, tokens: Sequence[int]) -> None:
        self._copied_at = None

    def draft(self, request: DraftRequest) -> Draft:
        out = Draft()
        if request.k <= 0:
            return out
        started = time.perf_counter()
        seq = np.asarray(request.tokens, dtype=np.int64)
        proposal, n, origin = lookup_with_texts(seq, request.k, self.max_ngram, self.min_ngram, request.texts)
        if n >= self.max_ngram:  # a copy where the match runs back as far as a copy's (a common phrase does not)
            corpus = next((text.tokens for text in request.texts if text.name == origin), None) if origin else None
            if find_match(seq, n, corpus, max_length=lookup.RESUME_ALIGNED)[1] >= lookup.RESUME_ALIGNED:
                self._copied_at = len(seq)
        elif self._copied_at is not None and len(seq) - self._copied_at <= lookup.RESUME_LOOK_BACK:
            broken = find_break(seq, request.texts, look_back=lookup.RESUME_LOOK_BACK, aligned=lookup.RESUME_ALIGNED)
            resumed = None if broken is None else resume_copy(seq, request.k, broken, reach=lookup.RESUME_REACH)
            if resumed is not None:
                proposal, n, origin = list(resumed.tokens), 0, resumed.origin
        out.tokens = proposal
        out.q = [Distribution.one_hot(t) for t in proposal]
        out.probs = [1.0] * len(proposal)
        out.sources = [DraftSource.LOOKUP] * len(proposal)
        out.match_lengths = [n] * len(proposal)
        out.origins = [origin] * len(proposal)
        out.step_seconds = (time.perf_counter() - started) / max(1, len(proposal))
        return out
