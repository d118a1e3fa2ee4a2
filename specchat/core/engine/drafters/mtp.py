"""Drafting with heads chained from the target's state: the target's own MTP (NextN) heads, and the base
class EAGLE-3 shares with them."""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest, MtpHeads, draft_from
from specchat.core.types import DrafterKind, DraftSource

MTP_P_MIN = 0.75
"""Draft p-min for MTP heads when none is set (0 means no gate, as for every drafter): the cutoff
published Qwen3.5 MTP runs in llama.cpp use (``--spec-draft-p-min 0.75``, llama.cpp PR #22673): one head
guessing many tokens ahead is confident for a few and then guesses poorly, and a draft it is unsure of
costs a verify position for little."""


class ChainedHeadsDrafter(Drafter):
    """Heads chained from the target's state at the last committed token: each draft is fed back with the
    heads' own hidden state (the target's MTP heads; an EAGLE-3 head).

    The heads follow every decode and cut of the target by themselves, so
    they need no prefill; each round drafts from the target's state at the
    last committed token.
    """

    acceptance_by_position = True  # each chained position guesses further ahead
    default_p_min: ClassVar[float | None] = None
    """The draft p-min when the request sets none (None: no gate)."""

    def __init__(self, heads: MtpHeads) -> None:
        self.heads = heads

    def draft(self, request: DraftRequest) -> Draft:
        out = Draft()
        heads = self.heads
        tokens = request.tokens
        pos = len(tokens) - 1  # where the last committed token goes; the target holds the rest
        k = min(request.k, heads.target.n_ctx - len(tokens))
        if k <= 0:
            return out
        started = time.perf_counter()
        row = heads.begin(tokens[-1], pos)
        if row is None:
            return out  # the target's state at the last token is unknown: a plain round
        synced = time.perf_counter()
        p_min = self.default_p_min if request.p_min is None else request.p_min
        try:
            draft_from(out, row, heads.step, dataclasses.replace(request, k=k, p_min=p_min), synced)
        finally:
            heads.end(pos)
        out.sync_seconds = synced - started  # the first head pass, paid every round
        return out


class MtpDrafter(ChainedHeadsDrafter):
    """The target's own MTP (NextN) heads."""

    kind = DrafterKind.MTP
    source = DraftSource.MTP
    default_p_min = MTP_P_MIN
