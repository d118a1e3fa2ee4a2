"""Drafting with a small model of its own: a second llama.cpp context kept in step with the target's text."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from specchat.core.engine.drafters.base import Draft, DraftContext, Drafter, DraftRequest, draft_from
from specchat.core.types import DrafterKind


class DraftModelDrafter(Drafter):
    """A small model with its own llama.cpp context, kept in step with the target's sequence."""

    kind = DrafterKind.DRAFT_MODEL
    follows_text = True

    def __init__(self, context: DraftContext) -> None:
        self.context = context
        self._last_k = 0

    def prefill(self, tokens: Sequence[int]) -> None:
        """Hold what the target holds, reusing the longest prefix the context can; save a recurrent state there."""
        started = time.perf_counter()
        reused = self.context.extend_to(tokens)
        self.context.checkpoint("prompt")
        self.read = (len(tokens) - reused, time.perf_counter() - started)

    def _held(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` its context holds (the common prefix)."""
        held = self.context.tokens
        n = min(len(held), len(tokens))
        parted = np.flatnonzero(np.asarray(held[:n], dtype=np.int64) != np.asarray(tokens[:n], dtype=np.int64))
        return int(parted[0]) if len(parted) else n

    def behind(self, tokens: Sequence[int]) -> int:
        return max(0, len(tokens) - self._held(tokens) - 2)

    def time_step(self, tokens: Sequence[int]) -> float | None:
        held = self._held(tokens)
        if len(tokens) - held - 2 <= 0:  # not behind (see behind)
            return None
        started = time.perf_counter()
        tried_before = self.context.tried_decodes
        self.context.extend_to(tokens[: held + 1])
        seconds = time.perf_counter() - started
        return None if self.context.tried_decodes != tried_before else seconds

    def draft(self, request: DraftRequest) -> Draft:
        out = Draft()
        tokens = request.tokens
        k = min(request.k, self.context.n_ctx - len(tokens))
        if k <= 0:
            return out
        started = time.perf_counter()
        ctx = self.context
        tried_before = ctx.tried_decodes
        row, reused = ctx.sync(tokens)
        # The drafts decoded below go one token per batch, which no recurrent snapshot can take
        # back: a hybrid or recurrent draft saves its state here and the next sync restores it.
        if k > 1:
            ctx.checkpoint("round")
        synced = time.perf_counter()
        # A sync of 1-2 tokens is the normal per-round catch-up (after a restore: the accepted
        # drafts too); a longer one (after plain rounds) is not what the next round will cost,
        # so it is not reported.
        catch_up = len(tokens) - reused
        steady_sync = catch_up <= 2 or (ctx.restored and catch_up <= self._last_k + 2)
        self._last_k = k
        draft_from(out, row, lambda x: ctx.decode([x])[0], dataclasses.replace(request, k=k), synced)
        if steady_sync:
            out.sync_seconds = synced - started
        else:
            out.catch_up, out.catch_up_seconds = catch_up, synced - started
        out.tried = ctx.tried_decodes != tried_before
        return out
