"""Drafting with an EAGLE-3 head: one small decoder layer over features of three target layers.

The head (llama.cpp's ``draft-eagle3``) follows the target by itself, so it
needs no prefill: each round it decodes the last committed token with the
fused features of the target's state before it, then chains one decode per
further draft, fed with its own pre-norm hidden state. q is the head's own
distribution, so greedy rounds keep the target's argmax and sampled rounds
take the exact rule, as for every model drafter.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Protocol

import numpy as np

from specchat.core.engine.drafters import Draft, Drafter, DraftRequest, _draft_from, _Sized
from specchat.core.types import DrafterKind, DraftSource


class Eagle3Head(Protocol):
    """What the EAGLE-3 drafter drives: a :class:`specchat.core.llama.heads.Eagle3Context`."""

    @property
    def target(self) -> _Sized: ...

    def begin(self, token: int, pos: int) -> np.ndarray | None: ...

    def step(self, token: int) -> np.ndarray: ...

    def end(self, pos: int) -> None: ...


class Eagle3Drafter(Drafter):
    """An EAGLE-3 head chained from the target's state at the last committed token.

    Without a draft p-min it drafts to the requested depth (llama.cpp's own
    default p-min is 0 for this drafter).
    """

    kind = DrafterKind.EAGLE3
    acceptance_by_position = True  # each chained or block position guesses further ahead
    source = DraftSource.EAGLE3

    def __init__(self, head: Eagle3Head) -> None:
        self.head = head

    def draft(self, request: DraftRequest) -> Draft:
        out = Draft()
        head = self.head
        tokens = request.tokens
        pos = len(tokens) - 1  # where the last committed token goes; the target holds the rest
        k = min(request.k, head.target.n_ctx - len(tokens))
        if k <= 0:
            return out
        started = time.perf_counter()
        row = head.begin(tokens[-1], pos)
        if row is None:
            return out  # the features before the last token are unknown: a plain round
        synced = time.perf_counter()
        try:
            _draft_from(out, row, head.step, dataclasses.replace(request, k=k), synced)
        finally:
            head.end(pos)
        out.sync_seconds = synced - started  # the first head pass, paid every round
        return out
