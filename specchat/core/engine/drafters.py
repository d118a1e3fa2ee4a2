"""Who proposes the drafts: a small model, the target's own MTP heads, a lookup in the text so far, or nobody.

A drafter is a :class:`Drafter`: the loop calls :meth:`Drafter.prefill` once
the target holds the prompt, then :meth:`Drafter.draft` with one
:class:`DraftRequest` per round. Adding a drafter means its module (a
subclass of :class:`Drafter`), its entry in
:data:`specchat.core.engine.registry.DRAFTERS` and its tests.

The llama.cpp objects a drafter drives are described by the protocols
:class:`DraftContext` and :class:`MtpHeads`, so the engine never imports
llama.cpp.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.lookup import lookup_match
from specchat.core.engine.sampling import Distribution, distribution, greedy_token
from specchat.core.engine.verify import top
from specchat.core.types import DrafterKind, DraftSource, SamplerParams, SpecchatError

if TYPE_CHECKING:
    from specchat.core.engine.costs import CostView


@dataclass(frozen=True)
class DraftRequest:
    """What one round asks of a drafter."""

    tokens: Sequence[int]  # the whole committed sequence (read during the call only)
    k: int  # propose at most this many tokens
    sampler: SamplerParams  # shapes the draft's q as it shapes the target's p
    rng: np.random.Generator
    cancel: CancelToken
    p_min: float | None = None  # stop once the draft's top probability falls below this (0: never; None: default)
    greedy: bool = False  # draft the argmax even when sampling (q is then one-hot)
    costs: CostView | None = None  # what the round's parts cost (verify by batch size, overhead), if measured
    # Asked after each drafted token with the tokens drafted so far and their probabilities: False stops the
    # draft there (a decision on the draft's own figures only, so the verdict stays lossless). None: never asked.
    keep_going: Callable[[Sequence[int], Sequence[float]], bool] | None = None
    eog: frozenset[int] = frozenset()  # end-of-generation tokens: nothing after one can be kept
    remaining: int | None = None  # tokens the reply may still write (its token limit); None: no limit known


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
    # A long catch-up's tokens and seconds (the committed tokens the draft model decodes in one batch
    # after sitting out rounds), reported where ``sync_seconds`` is not; 0 and None otherwise.
    catch_up: int = 0
    catch_up_seconds: float | None = None
    # Per token: who drafted it and, for lookup, the match length it continued (0 otherwise).
    # Empty: every token is the drafter's own ``source``.
    sources: list[DraftSource] = field(default_factory=list)
    match_lengths: list[int] = field(default_factory=list)
    # Per token: the draft's likeliest tokens with their probabilities (:func:`~specchat.core.engine.verify.top`
    # of its own distribution, also where it drafted the argmax); empty: taken from ``q``.
    top: list[tuple[tuple[int, float], ...]] = field(default_factory=list)


class Drafter(abc.ABC):
    """Proposes the tokens the target checks each round."""

    kind: ClassVar[str]
    """Its name in :data:`specchat.core.engine.registry.DRAFTERS`."""
    can_draft: ClassVar[bool] = True
    """False for a drafter that never proposes: the loop then runs plain rounds without asking it."""
    source: ClassVar[DraftSource] = DraftSource.MODEL
    """Who drafted a token when the draft names no source per token."""
    own_depth: ClassVar[bool] = False
    """True for a drafter that picks each round's length itself: at auto depth it gets the largest depth as k."""
    follows_text: ClassVar[bool] = False
    """True for a drafter that decodes the committed text in a context of its own: it catches up on the tokens
    committed while it sat out (the composite charges lookup rounds for that catch-up)."""
    read: tuple[int, float] = (0, 0.0)
    """The latest :meth:`prefill`: the prompt tokens it decoded and the seconds they took."""
    acceptance_by_position: ClassVar[bool] = False
    """True where a draft's acceptance falls with its position in the round (heads chaining their own guesses):
    the composite then keeps its acceptance per position rather than pooled."""

    def prefill(self, tokens: Sequence[int]) -> None:  # noqa: B027 - most drafters need no catch-up
        """Catch up on the prompt, once per reply, after the target holds ``tokens`` (the prompt minus its last)."""

    def prompt_reused(self, share: float) -> None:  # noqa: B027 - most drafters have no use for it
        """Before :meth:`prefill`: the share of the prompt the target held already (earlier turns, kept prompts)."""

    @abc.abstractmethod
    def draft(self, request: DraftRequest) -> Draft:
        """Propose up to ``request.k`` tokens to follow ``request.tokens``."""

    def behind(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` a :attr:`follows_text` drafter would decode to catch up, beyond a round's usual
        one or two (0 for the others)."""
        return 0


class DraftContext(Protocol):
    """What the draft model drafter drives: a :class:`specchat.core.llama.context.Context`."""

    n_ctx: int
    restored: bool  # whether the latest cut restored a saved state
    tokens: list[int]  # what its memory holds, position by position

    def extend_to(self, tokens: Sequence[int]) -> int: ...

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]: ...

    def decode(self, tokens: Sequence[int]) -> np.ndarray: ...

    def checkpoint(self, slot: str) -> None: ...


class _Sized(Protocol):
    @property
    def n_ctx(self) -> int: ...


class MtpHeads(Protocol):
    """What chained heads drive: the target's MTP heads (:class:`specchat.core.llama.context.MtpContext`) or an
    EAGLE-3 head (:class:`specchat.core.llama.heads.Eagle3Context`)."""

    @property
    def target(self) -> _Sized: ...

    def begin(self, token: int, pos: int) -> np.ndarray | None: ...

    def step(self, token: int) -> np.ndarray: ...

    def end(self, pos: int) -> None: ...


class NoDrafter(Drafter):
    """Plain decoding: never drafts."""

    kind = DrafterKind.NONE
    can_draft = False

    def draft(self, request: DraftRequest) -> Draft:
        return Draft()


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

    def behind(self, tokens: Sequence[int]) -> int:
        held = self.context.tokens
        n = min(len(held), len(tokens))
        parted = np.flatnonzero(np.asarray(held[:n], dtype=np.int64) != np.asarray(tokens[:n], dtype=np.int64))
        prefix = int(parted[0]) if len(parted) else n
        return max(0, len(tokens) - prefix - 2)

    def draft(self, request: DraftRequest) -> Draft:
        out = Draft()
        tokens = request.tokens
        k = min(request.k, self.context.n_ctx - len(tokens))
        if k <= 0:
            return out
        started = time.perf_counter()
        ctx = self.context
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
        _draft_from(out, row, lambda x: ctx.decode([x])[0], dataclasses.replace(request, k=k), synced)
        if steady_sync:
            out.sync_seconds = synced - started
        else:
            out.catch_up, out.catch_up_seconds = catch_up, synced - started
        return out


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
            _draft_from(out, row, heads.step, dataclasses.replace(request, k=k, p_min=p_min), synced)
        finally:
            heads.end(pos)
        out.sync_seconds = synced - started  # the first head pass, paid every round
        return out


class MtpDrafter(ChainedHeadsDrafter):
    """The target's own MTP (NextN) heads."""

    kind = DrafterKind.MTP
    source = DraftSource.MTP
    default_p_min = MTP_P_MIN


def _draft_from(out: Draft, row: np.ndarray, step: Callable[[int], np.ndarray], request: DraftRequest,
                synced: float) -> None:
    """Draw up to ``request.k`` drafts into ``out``, starting from logits ``row``; ``step(x)`` gives the next row."""
    sampler = request.sampler
    decodes = 0
    decode_seconds = 0.0
    history = list(request.tokens[-sampler.repeat_last_n :]) if sampler.repeat_last_n else []
    for i in range(request.k):
        q = distribution(row, history, sampler)
        if request.p_min and q.max_prob() < request.p_min:
            break
        if sampler.greedy or request.greedy:
            x = greedy_token(row, history, sampler)
            q_used = Distribution.one_hot(x)
        else:
            x = q.sample(request.rng)
            q_used = q
        out.tokens.append(x)
        out.q.append(q_used)
        out.probs.append(q.prob(x))
        out.top.append(top(q))
        history.append(x)
        if i == request.k - 1 or request.cancel.cancelled or x in request.eog:
            break
        if request.keep_going is not None and not request.keep_going(out.tokens, out.probs):
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


class NgramDrafter(Drafter):
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and propose what followed.

    It looks in the whole committed sequence each round, so it needs no prefill.
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
        proposal, n = lookup_match(seq, request.k, self.max_ngram, self.min_ngram)
        out.tokens = proposal
        out.q = [Distribution.one_hot(t) for t in proposal]
        out.probs = [1.0] * len(proposal)
        out.sources = [DraftSource.LOOKUP] * len(proposal)
        out.match_lengths = [n] * len(proposal)
        out.step_seconds = (time.perf_counter() - started) / max(1, len(proposal))
        return out
