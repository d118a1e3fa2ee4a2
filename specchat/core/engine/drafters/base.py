"""What every drafter shares: the round's request, the draft it returns, the :class:`Drafter` base class, the
protocols of the llama.cpp objects drafters drive, and :func:`draft_from` (drawing drafts from logits rows).

The llama.cpp objects are described by the protocols :class:`DraftContext`,
:class:`MtpHeads` and :class:`SizedContext`, so the engine never imports llama.cpp.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.lookup import LookupText
from specchat.core.engine.sampling import Distribution, distribution, greedy_token
from specchat.core.engine.verify import top
from specchat.core.types import DraftSource, SamplerParams

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
    # Texts outside the context that lookup searches for this reply (attachments, a prediction), by name.
    texts: Sequence[LookupText] = ()
    # The previous round's verify pass ran on a thread count the tuner was trying: its time is no cost.
    previous_tried: bool = False


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
    # A decode of the draft ran on a thread count the tuner was trying: its timings say what that count costs,
    # not what drafting costs.
    tried: bool = False
    # Seconds the call spent reading the prompt (a drafter that reads it late, at its first draft of a reply):
    # the loop counts them as the prompt's time, as it counts a read at the reply's start.
    read_seconds: float = 0.0
    # Per token: who drafted it and, for lookup, the match length it continued (0 otherwise).
    # Empty: every token is the drafter's own ``source``.
    sources: list[DraftSource] = field(default_factory=list)
    match_lengths: list[int] = field(default_factory=list)
    # Per token: the name of the text a lookup drafted it from (:attr:`DraftRequest.texts`); "" for the
    # conversation and for drafts that are not a lookup's. Empty: all "".
    origins: list[str] = field(default_factory=list)
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

    def time_step(self, tokens: Sequence[int]) -> float | None:
        """Decode one token of the catch-up on ``tokens`` alone and return its seconds: what a draft step costs
        now, without drafting. None where there is nothing to catch up on (and for drafters that do not follow
        the text), and where the decode ran on a thread count the tuner was trying."""
        return None


class DraftContext(Protocol):
    """What the draft model drafter drives: a :class:`specchat.core.llama.context.Context`."""

    n_ctx: int
    restored: bool  # whether the latest cut restored a saved state
    tried_decodes: int  # decodes that ran on a thread count the tuner was trying (Context.tried_decodes)
    tokens: list[int]  # what its memory holds, position by position

    def extend_to(self, tokens: Sequence[int]) -> int: ...

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]: ...

    def decode(self, tokens: Sequence[int]) -> np.ndarray: ...

    def checkpoint(self, slot: str) -> None: ...


class SizedContext(Protocol):
    """Anything with a context size: the target context a head follows."""

    @property
    def n_ctx(self) -> int: ...


class MtpHeads(Protocol):
    """What chained heads drive: the target's MTP heads (:class:`specchat.core.llama.context.MtpContext`) or an
    EAGLE-3 head (:class:`specchat.core.llama.heads.Eagle3Context`)."""

    @property
    def target(self) -> SizedContext: ...

    def begin(self, token: int, pos: int) -> np.ndarray | None: ...

    def step(self, token: int) -> np.ndarray: ...

    def end(self, pos: int) -> None: ...


class DraftWalk:
    """One draft drawn a token at a time from logits rows: :meth:`offer` takes the row after the draft so far and
    names the token to decode next (None once the draft ends). :func:`draft_from` walks one draft; the batched
    draft model walks several in lockstep, one decode carrying every draft's next token."""

    def __init__(self, out: Draft, request: DraftRequest) -> None:
        self.out, self.request = out, request
        sampler = request.sampler
        self.history = list(request.tokens[-sampler.repeat_last_n :]) if sampler.repeat_last_n else []
        self.drawn = 0
        self.decodes = 0
        self.decode_seconds = 0.0

    def offer(self, row: np.ndarray) -> int | None:
        """Draw the next draft from ``row``; the token whose row comes next, or None when the draft ends here."""
        request, out, sampler = self.request, self.out, self.request.sampler
        if self.drawn >= request.k:
            return None
        q = distribution(row, self.history, sampler)
        if request.p_min and q.max_prob() < request.p_min:
            return None
        if sampler.greedy or request.greedy:
            x = greedy_token(row, self.history, sampler)
            q_used = Distribution.one_hot(x)
        else:
            x = q.sample(request.rng)
            q_used = q
        out.tokens.append(x)
        out.q.append(q_used)
        out.probs.append(q.prob(x))
        out.top.append(top(q))
        self.history.append(x)
        self.drawn += 1
        if self.drawn == request.k or request.cancel.cancelled or x in request.eog:
            return None
        if request.keep_going is not None and not request.keep_going(out.tokens, out.probs):
            return None
        return x

    def decoded(self, seconds: float) -> None:
        """One decode for the next row took ``seconds`` (shared with other drafts when batched)."""
        self.decodes += 1
        self.decode_seconds += seconds

    def finish(self, synced: float) -> None:
        """Fill in the draft's timings; ``synced``: when its first row was ready."""
        out = self.out
        if self.decodes > 0:
            out.step_seconds = self.decode_seconds / self.decodes
        if out.tokens:
            # Everything after the catch-up that was not a decode: one distribution (and draw) per token.
            out.sample_seconds = (time.perf_counter() - synced - self.decode_seconds) / len(out.tokens)


def draft_from(
    out: Draft, row: np.ndarray, step: Callable[[int], np.ndarray], request: DraftRequest, synced: float
) -> None:
    """Draw up to ``request.k`` drafts into ``out``, starting from logits ``row``; ``step(x)`` gives the next row."""
    walk = DraftWalk(out, request)
    x = walk.offer(row)
    while x is not None:
        decode_started = time.perf_counter()
        row = step(x)
        walk.decoded(time.perf_counter() - decode_started)
        x = walk.offer(row)
    walk.finish(synced)
