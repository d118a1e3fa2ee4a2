"""Who proposes the drafts: a small model, the target's own MTP heads, a lookup in the text so far, or nobody."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.sampling import Distribution, distribution, greedy_token
from specchat.core.types import DrafterKind, SamplerParams, SpecchatError


@dataclass
class Draft:
    """One round's proposal: tokens, the distribution each was drawn from, and the time per step."""

    tokens: list[int] = field(default_factory=list)
    q: list[Distribution] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    # Mean seconds per draft step after the first: one decode (the model drafter), or one
    # proposed token (the n-gram drafter); None when the round had none.
    step_seconds: float | None = None
    # Mean seconds per drafted token spent on the draft's distribution and draw; None if not measured.
    sample_seconds: float | None = None
    # Seconds the draft model spent catching up with the committed tokens (1-2 tokens in
    # steady state, once per round); None when the catch-up was long or there was none.
    sync_seconds: float | None = None


class Drafter(Protocol):
    kind: DrafterKind

    def draft(
        self,
        tokens: Sequence[int],
        k: int,
        sampler: SamplerParams,
        rng: np.random.Generator,
        cancel: CancelToken,
        p_min: float = 0.0,
        greedy: bool = False,
    ) -> Draft:
        """Propose up to ``k`` tokens to follow ``tokens`` (the whole committed sequence)."""
        ...


class NoDrafter:
    """Plain decoding: never drafts."""

    kind = DrafterKind.NONE

    def draft(self, tokens: Sequence[int], k: int, sampler: SamplerParams, rng: np.random.Generator,
              cancel: CancelToken, p_min: float = 0.0, greedy: bool = False) -> Draft:
        return Draft()


class DraftModelDrafter:
    """A small model with its own llama.cpp context, kept in step with the target's sequence.

    ``context`` is a :class:`specchat.core.llama.context.Context` (duck-typed
    here so the engine does not import llama.cpp).
    """

    kind = DrafterKind.DRAFT_MODEL

    def __init__(self, context: object) -> None:
        self.context = context
        self._last_k = 0

    def draft(self, tokens: Sequence[int], k: int, sampler: SamplerParams, rng: np.random.Generator,
              cancel: CancelToken, p_min: float = 0.0, greedy: bool = False) -> Draft:
        out = Draft()
        if k <= 0:
            return out
        started = time.perf_counter()
        ctx = self.context
        room = ctx.n_ctx - len(tokens)
        k = min(k, room)
        if k <= 0:
            return out
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
        _draft_from(out, row, lambda x: ctx.decode([x])[0], tokens, k, sampler, rng, cancel, p_min, greedy, synced)
        if steady_sync:
            out.sync_seconds = synced - started
        return out


MTP_P_MIN = 0.75
"""Draft p-min for MTP heads when none is set: the cutoff published Qwen3.5 MTP runs in llama.cpp use
(``--spec-draft-p-min 0.75``, llama.cpp PR #22673): one head guessing many tokens ahead is confident
for a few and then guesses poorly, and a draft it is unsure of costs a verify position for little."""


class MtpDrafter:
    """The target's own MTP (NextN) heads, chained: each draft is fed back with the heads' hidden state.

    ``mtp`` is a :class:`specchat.core.llama.context.MtpContext` (duck-typed)
    that follows the target's positions; it drafts from the target's state at
    the last committed token, so it needs no catch-up of its own.
    """

    kind = DrafterKind.MTP

    def __init__(self, mtp: object) -> None:
        self.mtp = mtp

    def draft(self, tokens: Sequence[int], k: int, sampler: SamplerParams, rng: np.random.Generator,
              cancel: CancelToken, p_min: float = 0.0, greedy: bool = False) -> Draft:
        out = Draft()
        mtp = self.mtp
        pos = len(tokens) - 1  # where the last committed token goes; the target holds the rest
        k = min(k, mtp.target.n_ctx - len(tokens))  # type: ignore[attr-defined]
        if k <= 0:
            return out
        started = time.perf_counter()
        row = mtp.begin(tokens[-1], pos)  # type: ignore[attr-defined]
        if row is None:
            return out  # the target's hidden state at the last token is unknown: a plain round
        synced = time.perf_counter()
        try:
            _draft_from(out, row, mtp.step, tokens, k, sampler, rng, cancel,  # type: ignore[attr-defined]
                        p_min if p_min > 0.0 else MTP_P_MIN, greedy, synced)
        finally:
            mtp.end(pos)  # type: ignore[attr-defined]
        out.sync_seconds = synced - started  # the first head pass, paid every round
        return out


def _draft_from(out: Draft, row: np.ndarray, step: Callable[[int], np.ndarray], tokens: Sequence[int], k: int,
                sampler: SamplerParams, rng: np.random.Generator, cancel: CancelToken, p_min: float, greedy: bool,
                synced: float) -> None:
    """Draw up to ``k`` drafts into ``out``, starting from logits ``row``; ``step(x)`` gives the next row."""
    decodes = 0
    decode_seconds = 0.0
    history = list(tokens[-sampler.repeat_last_n :]) if sampler.repeat_last_n else []
    for i in range(k):
        q = distribution(row, history, sampler)
        if p_min > 0.0 and q.max_prob() < p_min:
            break
        if sampler.greedy or greedy:
            x = greedy_token(row, history, sampler)
            q_used = Distribution.one_hot(x)
        else:
            x = q.sample(rng)
            q_used = q
        out.tokens.append(x)
        out.q.append(q_used)
        out.probs.append(q.prob(x))
        history.append(x)
        if i == k - 1 or cancel.cancelled:
            break
        decode_started = time.perf_counter()
        row = step(x)
        decode_seconds += time.perf_counter() - decode_started
        decodes += 1
    ended = time.perf_counter()
    if decodes > 0:
        out.step_seconds = decode_seconds / decodes
    if out.tokens:
        # Everything after the catch-up that was not a decode: one distribution (and draw) per token.
        out.sample_seconds = (ended - synced - decode_seconds) / len(out.tokens)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and propose what followed."""

    kind = DrafterKind.NGRAM

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise SpecchatError(f"bad n-gram range {min_ngram}..{max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def draft(self, tokens: Sequence[int], k: int, sampler: SamplerParams, rng: np.random.Generator,
              cancel: CancelToken, p_min: float = 0.0, greedy: bool = False) -> Draft:
        out = Draft()
        if k <= 0:
            return out
        started = time.perf_counter()
        proposal = lookup_continuation(np.asarray(tokens, dtype=np.int64), k, self.max_ngram, self.min_ngram)
        out.tokens = proposal
        out.q = [Distribution.one_hot(t) for t in proposal]
        out.probs = [1.0] * len(proposal)
        out.step_seconds = (time.perf_counter() - started) / max(1, len(proposal))
        return out


def lookup_continuation(seq: np.ndarray, k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Up to k tokens that followed the most recent earlier match of seq's last n-gram."""
    n_total = len(seq)
    for n in range(min(max_ngram, n_total - 1), min_ngram - 1, -1):
        pattern = seq[n_total - n :]
        # Candidate starts i with seq[i:i+n] == pattern and i + n < n_total (something follows).
        limit = n_total - n
        mask = seq[:limit] == pattern[0]
        for j in range(1, n):
            mask &= seq[j : limit + j] == pattern[j]
        starts = np.flatnonzero(mask)
        if len(starts):
            follow = int(starts[-1]) + n
            return [int(t) for t in seq[follow : follow + k]]
    return []


def make_drafter(kind: DrafterKind, draft_context: object | None, mtp: object | None = None) -> Drafter:
    if kind is DrafterKind.DRAFT_MODEL:
        if draft_context is None:
            raise SpecchatError("no draft model is loaded; choose n-gram lookup or none")
        return DraftModelDrafter(draft_context)
    if kind is DrafterKind.MTP:
        if mtp is None:
            raise SpecchatError("the target has no MTP heads (no NextN layers) to draft with; "
                                "choose a draft model, n-gram lookup or none")
        return MtpDrafter(mtp)
    if kind is DrafterKind.NGRAM:
        return NgramDrafter()
    return NoDrafter()
