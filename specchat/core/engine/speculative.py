"""The draft -> verify -> accept loop, as a generator of events.

Invariant between rounds: the target's KV cache holds every committed token
except the last one, ``last``. A round decodes ``[last] + drafts`` in one
batch, which yields the target's distribution after ``last`` and after each
draft; the verdict (:func:`specchat.core.engine.verify.judge`) keeps a prefix
of the drafts plus one token of the target's own, and the cache is cut back
so the invariant holds again.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import AdaptiveDepth, DepthControl
from specchat.core.engine.detok import Detokenizer
from specchat.core.engine.drafters import Draft, Drafter, DraftRequest, NoDrafter
from specchat.core.engine.lookup import LookupText
from specchat.core.engine.verify import Verdict, judge, top
from specchat.core.types import (
    Drafted,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    SpecchatError,
    TopEntry,
    Verified,
)


class TargetContext(Protocol):
    """What the loop drives on the target: a :class:`specchat.core.llama.context.Context`."""

    @property
    def n_ctx(self) -> int: ...

    @property
    def tokens(self) -> Sequence[int]: ...

    def extend_to(self, tokens: Sequence[int]) -> int: ...

    def checkpoint(self, slot: str) -> None: ...

    def prepare_rollback(self, depth: int) -> None: ...

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray: ...

    @property
    def tried(self) -> bool:
        """Whether the latest decode ran (in part) on a thread count the tuner was trying: its time is no cost."""
        ...

    def truncate(self, n_keep: int) -> None: ...


@dataclass
class TargetSide:
    """What the loop needs from the target: its context, its end tokens, its token bytes."""

    context: TargetContext
    eog: frozenset[int]
    piece: Callable[[int], bytes]


def prefill(target: TargetSide, drafter: Drafter, prompt: Sequence[int]) -> int:
    """Bring the target, then the drafter, to the prompt minus its last token; return the target's reused count.

    The target reuses the longest prefix it can (for a recurrent model: up to
    a saved state, see :class:`~specchat.core.llama.context.Context`), and a
    recurrent model's state is saved at the end of the prompt, so that a
    regenerated reply or the next turn does not decode the conversation again.
    """
    body = prompt[:-1]
    reuse = target.context.extend_to(body)
    target.context.checkpoint("prompt")
    drafter.prompt_reused(reuse / len(body) if body else 0.0)
    drafter.prefill(body)
    return reuse


def generate(
    target: TargetSide,
    drafter: Drafter,
    prompt: Sequence[int],
    params: GenerationParams,
    *,
    depth: DepthControl | None = None,
    cancel: CancelToken | None = None,
    adaptive: AdaptiveDepth | None = None,
    texts: Sequence[LookupText] = (),
) -> Iterator[Event]:
    """Generate a reply to ``prompt`` (token ids), yielding Drafted/Verified events and one Finished.

    Without ``depth`` the depth is the one default (:data:`specchat.core.types.DEFAULT_DEPTH`). ``texts``: what
    lookup searches beside the conversation for this reply (every round's :attr:`DraftRequest.texts`).
    A SpecchatError once the reply has begun (a lost server, a failed decode) ends it with a Finished
    of reason ERROR that keeps the figures so far; the caches may then be mid-round.
    """
    reply = _Reply(
        target,
        drafter,
        prompt,
        params,
        depth if depth is not None else DepthControl(),
        cancel if cancel is not None else CancelToken(),
        adaptive if adaptive is not None else AdaptiveDepth(),
        texts,
    )
    try:
        reply.prefill()
        yield from reply.rounds()
    except SpecchatError as exc:
        reply.reason, reply.message = FinishReason.ERROR, str(exc)
    finished = reply.finish()  # the reply's own time ends here, before any probe
    if params.plain_probe and reply.reason in _PROBED:
        reply.probe_plain(params.plain_probe)
    yield finished


MIN_PROBE_TOKENS = 8  # fewer plain tokens time too little to divide by
# Replies that end with the target's state intact, where a plain probe can continue.
_PROBED = frozenset({FinishReason.EOS, FinishReason.MAX_TOKENS, FinishReason.STOP_STRING})


@dataclass
class _Round:
    """One round's working data, filled in step by step."""

    number: int
    started: float  # time.perf_counter() at the round's start
    depth: int = 0
    draft: Draft = field(default_factory=Draft)
    draft_seconds: float = 0.0
    draft_pieces: list[str] = field(default_factory=list)
    consumer_seconds: float = 0.0
    verdict: Verdict = Verdict(0, -1, (), 0.0)
    kept: list[int] = field(default_factory=list)  # the committed tokens: the verdict's, cut at the reply's end
    verify_seconds: float = 0.0
    verify_tried: bool = False  # the verify pass ran on a thread count the tuner was trying (Context.tried)


class _Reply:
    """One reply in progress: the committed tokens, its text, its counters and, once known, why it ends."""

    def __init__(
        self,
        target: TargetSide,
        drafter: Drafter,
        prompt: Sequence[int],
        params: GenerationParams,
        depth: DepthControl,
        cancel: CancelToken,
        adaptive: AdaptiveDepth,
        texts: Sequence[LookupText] = (),
    ) -> None:
        self.ctx = target.context
        self.texts = tuple(texts)
        if not prompt:
            raise SpecchatError("the prompt is empty")
        if len(prompt) >= self.ctx.n_ctx:
            raise SpecchatError(f"the prompt is {len(prompt)} tokens but the context holds {self.ctx.n_ctx}")
        self.target, self.drafter, self.params = target, drafter, params
        self.depth_control, self.cancel, self.adaptive = depth, cancel, adaptive
        self.rng = np.random.default_rng(params.seed)
        self.stats = GenerationStats(prompt_tokens=len(prompt))
        self.committed = list(prompt)
        self.detok = Detokenizer(target.piece)
        self.text: list[str] = []
        self.stops = tuple(s for s in params.stop_strings if s)
        self.longest_stop = max((len(s) for s in self.stops), default=0)
        self.reason: FinishReason | None = None
        self.message = ""
        self.generate_started = 0.0
        self.previous_tried = False  # the latest round's verify ran on a tried thread count (DraftRequest)

    def prefill(self) -> None:
        """Decode the prompt on both sides (timed as the prompt's)."""
        started = time.perf_counter()
        self.stats.reused_prompt_tokens = prefill(self.target, self.drafter, self.committed)
        self.stats.prompt_seconds = time.perf_counter() - started
        self.generate_started = time.perf_counter()

    def rounds(self) -> Iterator[Event]:
        """Run rounds until the reply ends, yielding each round's Drafted (if it drafted) and Verified."""
        for number in itertools.count():
            round_ = _Round(number, started=time.perf_counter())
            if self.halted():
                break
            round_.depth = self.choose_depth()
            self.draft(round_)
            if self.halted():
                break
            drafted = self.drafted_event(round_)
            if drafted is not None:
                handed = time.perf_counter()
                yield drafted
                round_.consumer_seconds = time.perf_counter() - handed  # the front end's time, not the engine's
            self.verify(round_)
            verified = self.verified_event(round_)
            self.account(round_)
            yield verified
            if self.reason is not None:
                break

    def probe_plain(self, n: int) -> None:
        """Time up to ``n`` tokens of plain decoding from where the reply ended, then cut the target back.

        Plain decoding at the reply's own context length, on the same machine moments later, counted by the
        same counters as the reply: the like-for-like denominator of its speed-up
        (``stats.plain_tokens_per_second``). Nothing is recorded when cancelled, failed or too short.
        """
        n = min(n, self.ctx.n_ctx - len(self.committed))
        if n < MIN_PROBE_TOKENS or self.cancel.cancelled:
            return
        keep = len(self.committed) - 1
        self.ctx.checkpoint("probe")  # a recurrent target comes back from here without decoding the reply again
        # Past an end-of-generation token or a stop string plain decoding goes on just as fast: time it all.
        probe = _Reply(
            dataclasses.replace(self.target, eog=frozenset()),
            NoDrafter(),
            self.committed,
            dataclasses.replace(self.params, max_tokens=n, stop_strings=(), plain_probe=0),
            DepthControl(0),
            self.cancel,
            AdaptiveDepth(),
        )
        probe.generate_started = time.perf_counter()
        try:
            for _ in probe.rounds():
                pass
            timed = probe.finish().stats
            self.ctx.truncate(keep)
        except SpecchatError:
            return  # the reply stands; a lost server or failed decode shows on the next one
        if probe.reason is not FinishReason.CANCELLED and timed.generated >= MIN_PROBE_TOKENS:
            self.stats.plain_tokens_per_second = timed.tokens_per_second
            self.stats.plain_tokens = timed.generated

    def halted(self) -> bool:
        """Whether the reply ends here, before its next step: cancelled, or no room left."""
        if self.cancel.cancelled:
            self.reason = FinishReason.CANCELLED
            return True
        if self.ctx.n_ctx - len(self.committed) < 0:
            self.reason, self.message = FinishReason.CONTEXT_FULL, f"the {self.ctx.n_ctx}-token context is full"
            return True
        return False

    def choose_depth(self) -> int:
        """This round's depth: fixed or adaptive, within the tokens and the positions left."""
        remaining = self.params.max_tokens - self.stats.generated
        room = self.ctx.n_ctx - len(self.committed)  # positions left for [last] + drafts beyond the current n_past
        requested = self.depth_control.requested
        if not self.drafter.can_draft:
            k = 0
        elif requested is None and self.drafter.own_depth:
            k = self.adaptive.max_depth if self.adaptive.costs.measured_plain() else 0
        elif requested is None:
            k = self.adaptive.choose()
        else:
            k = requested
        return max(0, min(k, remaining - 1, room))

    def draft(self, round_: _Round) -> None:
        """Ask the drafter for up to ``round_.depth`` tokens (none at depth 0)."""
        started = time.perf_counter()
        if round_.depth > 0:
            self.take_draft(round_, self.drafter.draft(self.draft_request(round_.depth)))
        round_.draft_seconds = time.perf_counter() - started

    def draft_request(self, k: int) -> DraftRequest:
        """What this reply asks of its drafter for a draft of up to ``k`` tokens."""
        params = self.params
        return DraftRequest(
            self.committed,
            k,
            params.sampler,
            self.rng,
            self.cancel,
            params.draft_p_min,
            params.greedy_draft,
            self.adaptive.costs,
            eog=self.target.eog,
            remaining=min(params.max_tokens - self.stats.generated, self.ctx.n_ctx - len(self.committed)),
            texts=self.texts,
            previous_tried=self.previous_tried,
        )

    def take_draft(self, round_: _Round, draft: Draft) -> None:
        """Make ``draft`` the round's (the batched engine drafts several replies' drafts together, then each
        takes its own)."""
        round_.draft = draft
        _label_sources(draft, self.drafter)
        _cut_after_end(draft, self.target.eog)
        read = draft.read_seconds
        if read > 0.0:  # a drafter's late read of the prompt is the prompt's time, as a read before it is
            self.stats.prompt_seconds += read
            self.generate_started += read
        if self.drafter.own_depth:  # it was handed a cap and chose its own length: 0 where plain decoding won
            round_.depth = len(draft.tokens)

    def drafted_event(self, round_: _Round) -> Drafted | None:
        """The drafts with their text, or None for a round without any."""
        drafts = round_.draft.tokens
        if not drafts:
            return None
        fork = self.detok.fork()
        round_.draft_pieces = [fork.push(t) for t in drafts]
        return Drafted(
            round_.number,
            tuple(drafts),
            tuple(round_.draft_pieces),
            tuple(round_.draft.probs),
            tuple(round_.draft.sources),
            tuple(round_.draft.match_lengths),
            tuple(round_.draft.origins),
        )

    def verify(self, round_: _Round) -> None:
        """Decode ``[last] + drafts``, take the verdict, commit what it keeps and cut the cache back."""
        started = time.perf_counter()
        drafts = round_.draft.tokens
        self.ctx.prepare_rollback(len(drafts))  # a recurrent target saves its state unless it can roll back in place
        rows = self.ctx.decode([self.committed[-1], *drafts], all_logits=True)
        round_.verify_tried = self.ctx.tried
        self.settle(round_, rows)
        round_.verify_seconds = time.perf_counter() - started
        assert len(self.ctx.tokens) == len(self.committed) - 1  # the loop's invariant

    def settle(self, round_: _Round, rows: np.ndarray) -> None:
        """Take the verdict on the target's ``rows`` after ``[last] + drafts``, commit what it keeps and cut the
        cache back (the batched engine decodes the rows of several replies at once, then settles each)."""
        drafts = round_.draft.tokens
        verdict = judge(rows, self.committed, drafts, round_.draft.q, self.params.sampler, self.rng)
        round_.verdict = verdict
        round_.kept = self._commit([*drafts[: verdict.n_accepted], verdict.token])
        self.ctx.truncate(len(self.committed) - 1)  # checked: an exact recovery where the memory cannot cut in place

    def _commit(self, new_tokens: list[int]) -> list[int]:
        """Append ``new_tokens`` up to the token limit or an end-of-generation token; return those appended."""
        kept: list[int] = []
        limit = self.params.max_tokens - self.stats.generated
        for t in new_tokens:
            if len(kept) >= limit:
                self.reason = FinishReason.MAX_TOKENS
                break
            kept.append(t)
            if t in self.target.eog:
                self.reason = FinishReason.EOS
                break
        if self.reason is None and len(kept) >= limit:
            self.reason = FinishReason.MAX_TOKENS
        self.committed.extend(kept)
        return kept

    def verified_event(self, round_: _Round) -> Verified:
        """The round's outcome with its text, cut before a stop string (which ends the reply)."""
        drafts, verdict, kept, eog = round_.draft.tokens, round_.verdict, round_.kept, self.target.eog
        n_acc = verdict.n_accepted
        accepted = drafts[: min(len(kept), n_acc)]
        correction = kept[-1] if len(kept) > n_acc else None
        accepted_pieces = [self.detok.push(t) if t not in eog else "" for t in accepted]
        correction_piece = ""
        if correction is not None and correction not in eog:
            correction_piece = self.detok.push(correction)
        if self.stops:
            before = "".join(self.text)
            added = "".join(accepted_pieces) + correction_piece
            window = before[-self.longest_stop :] + added
            hits = [h for h in (window.find(s) for s in self.stops) if h >= 0]
            if hits:
                cut = min(hits) - min(len(before), self.longest_stop)  # index into `added`
                accepted_pieces, correction_piece = _trim_pieces(accepted_pieces, correction_piece, max(cut, 0))
                self.reason = FinishReason.STOP_STRING
        event = Verified(
            round=round_.number,
            depth=round_.depth,
            accepted=tuple(accepted),
            rejected=tuple(drafts[n_acc:]),
            correction=correction,
            accepted_pieces=tuple(accepted_pieces),
            rejected_pieces=tuple(round_.draft_pieces[n_acc:]),
            correction_piece=correction_piece,
            target_probs=verdict.target_probs,
            draft_probs=tuple(round_.draft.probs),
            correction_prob=verdict.token_prob,
            sources=tuple(round_.draft.sources),
            match_lengths=tuple(round_.draft.match_lengths),
            origins=tuple(round_.draft.origins),
            target_top=tuple(self._named(entries) for entries in verdict.target_top),
            draft_top=tuple(self._named(entries) for entries in round_.draft.top),
            greedy=self.params.sampler.greedy,
            elapsed=time.perf_counter() - self.generate_started,
        )
        self.text.append(event.text)
        return event

    def _named(self, entries: Sequence[tuple[int, float]]) -> tuple[TopEntry, ...]:
        """``(token, probability)`` entries with each token's text (bytes that are no UTF-8 shown as \\xNN)."""
        piece = self.target.piece
        return tuple((t, p, piece(t).decode("utf-8", errors="backslashreplace")) for t, p in entries)

    def account(self, round_: _Round) -> None:
        """Count the round in the reply's statistics and tell the depth controller what it cost."""
        draft, n_drafted, n_acc = round_.draft, len(round_.draft.tokens), round_.verdict.n_accepted
        stats = self.stats
        stats.rounds += 1 if n_drafted else 0
        stats.drafted += n_drafted
        stats.accepted += n_acc
        stats.generated += len(round_.kept)
        stats.depth = round_.depth
        for i, source in enumerate(draft.sources):
            stats.count_source(source, 1, 1 if i < n_acc else 0)
        overhead_seconds = (
            time.perf_counter()
            - round_.started
            - round_.draft_seconds
            - round_.verify_seconds
            - round_.consumer_seconds
        )
        self.previous_tried = round_.verify_tried
        # A draft decoded on a tried count times nothing of drafting; a verify pass on one, nothing of the round.
        step, sync, sample = (
            (None, None, None) if draft.tried else (draft.step_seconds, draft.sync_seconds, draft.sample_seconds)
        )
        verify = None if round_.verify_tried else round_.verify_seconds
        self.adaptive.observe(n_drafted, n_acc, step, verify, overhead_seconds, sync, sample)

    def finish(self) -> Finished:
        """The last event: why the reply ended, and its statistics."""
        self.stats.generate_seconds = time.perf_counter() - self.generate_started
        self.stats.plain_tokens_per_second_estimate = self.adaptive.costs.plain_rate()
        return Finished(self.reason or FinishReason.ERROR, self.stats, self.message)


def _label_sources(draft: Draft, drafter: Drafter) -> None:
    """Give every drafted token a source and a match length: the drafter's own where the draft names none."""
    n = len(draft.tokens)
    if len(draft.sources) != n:
        draft.sources = [drafter.source] * n
    if len(draft.match_lengths) != n:
        draft.match_lengths = [0] * n
    if len(draft.origins) != n:
        draft.origins = [""] * n
    if len(draft.top) != n:  # a drafter that lists none, or not for a tail it added (one-hot lookups)
        draft.top = draft.top[:n] + [top(q) for q in draft.q[len(draft.top) : n]]


def _cut_after_end(draft: Draft, eog: frozenset[int]) -> None:
    """Drop the drafts after the first end-of-generation token: the reply ends there, whatever the target says."""
    for i, token in enumerate(draft.tokens):
        if token in eog:
            n = i + 1
            draft.tokens, draft.q, draft.probs = draft.tokens[:n], draft.q[:n], draft.probs[:n]
            draft.sources, draft.match_lengths, draft.top = draft.sources[:n], draft.match_lengths[:n], draft.top[:n]
            draft.origins = draft.origins[:n]
            return


def _trim_pieces(pieces: list[str], tail: str, keep_chars: int) -> tuple[list[str], str]:
    """Cut the round's pieces so that only the first ``keep_chars`` characters remain."""
    out: list[str] = []
    left = keep_chars
    for p in pieces:
        out.append(p[: max(left, 0)])
        left -= len(p)
    return out, tail[: max(left, 0)]


# The batched engine (specchat/core/engine/batched.py) drives the same per-reply state, one per sequence.
ReplyState = _Reply
RoundState = _Round
