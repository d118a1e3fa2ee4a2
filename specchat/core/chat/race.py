"""Racing speculative against plain decoding on a finished greedy reply, the two runs interleaved in blocks.

The machine's speed drifts (other processes come and go), so a plain run
timed minutes after the reply says as much about the load as about
speculation. A race therefore decodes the reply's prompt twice *now*: a
fresh speculative run with the drafter and depth the reply used, and a plain
run (the target alone), both with the reply's sampler and length, taking
turns in blocks of ``BLOCK_TOKENS`` tokens in the order S P, P S, S P, ...
(so a steady drift costs both runs alike, and a linear one cancels out over
each two pairs). Each run's ratio figure is the sum of its own blocks' time.

Why blocks of fresh runs and not two live generators advanced in turn: both
decode in the target's one context, and a head drafter (MTP, EAGLE-3, DFlash)
follows the target's state, which the other run's decodes would overwrite.
So each block is its own reply (:meth:`~specchat.core.runtime.runtime.Runtime.stream`)
from that run's prompt and tokens so far, exactly like continuing a reply cut
at the token limit: its prefill brings the target (a KV cut, since the other
run stopped on the same tokens) and the drafter there, untimed, and its
rounds are timed by the engine's clock as a reply's are. The text is
detokenized across blocks, so a character split between two blocks is whole.

At temperature 0 both runs should write the same text. Where they do not, the
first differing token is kept with the target's likeliest tokens there as the
plain run saw them, and the gap between the two choices is measured against
the largest logit at that position (tests/support/identity.py explains why):
within ``TIE_RELATIVE_GAP`` it is a float tie between batched and one-token
decoding, anything more a real divergence.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.detok import Detokenizer
from specchat.core.engine.registry import default_drafter
from specchat.core.types import (
    MAX_DEPTH,
    DrafterKind,
    Finished,
    FinishReason,
    GenerationParams,
    SamplerParams,
    SpecchatError,
    TextSource,
    Verified,
)

from .race_record import (
    PLAIN,
    SPECULATIVE,
    Block,
    Fork,
    RaceRecord,
    RaceRun,
    committed_pieces,
    drift_note,
    first_difference,
)
from .transcript import Message, ReplyFigures

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import Runtime

BLOCK_TOKENS = 32  # tokens per block: a few seconds of decoding, so the two runs take turns often
PROGRESS_SECONDS = 0.25  # within a block, progress is told at most this often
_ENDED = frozenset({FinishReason.EOS, FinishReason.STOP_STRING, FinishReason.CONTEXT_FULL})


def reply_sampler(figures: ReplyFigures) -> SamplerParams | None:
    """The sampler a reply was generated with, as recorded at its start (None: not recorded)."""
    if not figures.sampler:
        return None
    known = SamplerParams.__dataclass_fields__
    values: dict[str, Any] = {k: v for k, v in figures.sampler.items() if k in known}
    for name in ("top_k", "repeat_last_n"):
        if name in values:
            values[name] = int(values[name])
    try:
        return SamplerParams(**values)
    except SpecchatError:
        return None


def race_refusal(message: Message) -> str:
    """Why plain decoding cannot be raced on ``message`` ("" when it can); a stored race can always replay."""
    figures = message.figures
    if message.role != "assistant" or figures is None:
        return "races compare replies"
    if not message.finished:
        return "wait for the reply to finish"
    if RaceRecord.from_dict(figures.race) is not None:
        return ""
    sampler = reply_sampler(figures)
    if sampler is None or not figures.timeline:
        return "this reply's settings and round times were not recorded (it is older than races)"
    if not sampler.greedy:
        return f"races compare greedy replies (temperature 0); this one was sampled at T={sampler.temperature:g}"
    if message.finish_reason in (None, FinishReason.ERROR.value) or figures.generated < 1:
        return "the reply did not finish"
    return ""


@dataclass(frozen=True)
class RaceRequest:
    """What a race needs: the conversation before the reply, the reply's sampler, length, drafting and pieces."""

    message_id: int
    history: list[dict[str, str]]
    sampler: SamplerParams
    max_tokens: int
    spec_pieces: tuple[str, ...]
    drafter: str | None = None  # the reply's drafter (a registry name); None: not recorded, the pair's default
    depth: int | None = None  # the reply's depth; None: auto
    expected_rate: float = 0.0  # plain tokens/s measured before the race (the reply's probe); 0: none known
    sources: tuple[TextSource, ...] = ()  # texts the reply drafted from by name (the conversation's files)

    @classmethod
    def for_reply(
        cls,
        message: Message,
        history: list[dict[str, str]],
        baseline_rate: float = 0.0,
        sources: Sequence[TextSource] = (),
    ) -> RaceRequest:
        """The request for a raceable stored ``message`` whose prompt is ``history`` (``sources``: the files the
        reply drafted from, which the speculative run drafts from too).

        The race's plain rate is later checked against the reply's own probe (plain decoding timed right after
        it), or where it has none against ``baseline_rate`` (the pair's measured plain rate).
        """
        refusal = race_refusal(message)
        figures = message.figures
        sampler = reply_sampler(figures) if figures is not None else None
        if refusal or figures is None or sampler is None or message.id is None:
            raise SpecchatError(f"cannot race this reply: {refusal or 'it is not stored yet'}")
        probe = figures.final.plain_tokens_per_second if figures.final is not None else 0.0
        drafting = figures.drafting or {}
        drafter = drafting.get("drafter")
        depth = drafting.get("depth")
        return cls(
            message.id,
            history,
            sampler,
            figures.generated,
            tuple(committed_pieces(message.spans or [])),
            drafter if isinstance(drafter, str) else None,
            depth if type(depth) is int and 0 <= depth <= MAX_DEPTH else None,
            probe if probe > 0 else max(0.0, baseline_rate),
            tuple(sources),
        )


@dataclass(frozen=True)
class RaceProgress:
    """How far a race has come: the blocks run, the one running, and each run's tokens and seconds so far."""

    block: int  # the block running (from 1)
    blocks: int  # blocks planned in all (fewer run where a reply ends early)
    side: str  # the running block's run: SPECULATIVE or PLAIN
    spec_tokens: int
    plain_tokens: int
    total: int  # tokens each run decodes at most
    spec_seconds: float
    plain_seconds: float


Progress = Callable[[RaceProgress], None]


@dataclass
class RaceSide:
    """One side of a race, decoded block by block (:meth:`block`) from its own tokens so far."""

    side: str
    drafter: str
    depth: int | None
    sources: tuple[TextSource, ...] = ()  # texts lookup drafts from by name
    tokens: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)  # one per committed token, detokenized across blocks
    fates: list[tuple[int, str]] = field(default_factory=list)
    tops: list[tuple[tuple[str, float], ...]] = field(default_factory=list)  # the target's view, per token
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    seconds: float = 0.0  # decoding time of the blocks run so far
    first_token_seconds: float = 0.0
    reason: FinishReason | None = None
    detok: Detokenizer | None = None

    def done(self, total: int) -> bool:
        return self.reason in _ENDED or len(self.tokens) >= total

    def block(
        self,
        runtime: Runtime,
        prompt: list[int],
        params: GenerationParams,
        n: int,
        cancel: CancelToken,
        told: Callable[[], None],
    ) -> None:
        """Decode up to ``n`` more tokens from where this run stopped; their rounds join its timeline."""
        side = runtime.target_side
        if self.detok is None:
            self.detok = Detokenizer(side.piece)
        params = GenerationParams(sampler=params.sampler, max_tokens=n, seed=0)
        # recalled once for the race (run_race): a kept state per block would crowd the conversation's out
        stream = runtime.stream(
            [*prompt, *self.tokens],
            params,
            drafter=self.drafter,
            depth=DepthControl(self.depth),
            cancel=cancel,
            recall=False,
            sources=self.sources,
        )
        elapsed, first = 0.0, not self.tokens
        for event in stream:
            if isinstance(event, Verified):
                self._round(event, side.eog, self.seconds)
                elapsed = event.elapsed
                told()
            elif isinstance(event, Finished):
                if event.reason is FinishReason.ERROR:
                    raise SpecchatError(event.message or f"the {self.side} run failed")
                if first and self.timeline:
                    self.first_token_seconds = round(event.stats.prompt_seconds + self.timeline[0][0], 4)
                self.reason = event.reason
        self.seconds += elapsed

    def _round(self, event: Verified, eog: frozenset[int], offset: float) -> None:
        assert self.detok is not None
        pieces = [self.detok.push(t) if t not in eog else "" for t in event.committed]
        self.tokens.extend(event.committed)
        self.pieces.extend(pieces)
        n_accepted = len(event.accepted)
        for i, piece in enumerate(pieces):
            kind = "a" if i < n_accepted else "t"
            if self.fates and self.fates[-1][1] == kind:
                self.fates[-1] = (self.fates[-1][0] + len(piece), kind)
            elif piece:
                self.fates.append((len(piece), kind))
        if self.side == PLAIN:
            last = event.target_top[-1] if event.target_top else ()
            self.tops.append(tuple((text, p) for _, p, text in last))
        self.timeline.append((round(offset + event.elapsed, 4), len(pieces), sum(len(p) for p in pieces)))

    def record(self) -> RaceRun:
        reason = self.reason.value if self.reason is not None else FinishReason.MAX_TOKENS.value
        return RaceRun(
            "".join(self.pieces),
            self.timeline,
            self.first_token_seconds,
            reason,
            self.fates if self.side == SPECULATIVE else [],
        )


def run_race(
    runtime: Runtime,
    request: RaceRequest,
    cancel: CancelToken,
    progress: Progress | None = None,
    block_tokens: int = BLOCK_TOKENS,
) -> RaceRecord | None:
    """Race ``request``'s reply: both runs in turns of ``block_tokens`` tokens; None if cancelled.

    Use on the runtime's thread. The conversation's own state is not touched (the caches then hold the race's
    tokens: the next reply finds its prefix and reads the rest again). ``progress`` is told after every block
    and every ``PROGRESS_SECONDS`` within one.
    """
    prompt = runtime.prompt(request.history).tokens
    drafter = request.drafter or default_drafter(runtime.offered).name
    params = GenerationParams(sampler=request.sampler, max_tokens=request.max_tokens, seed=0)
    spec = RaceSide(SPECULATIVE, drafter, request.depth, request.sources)
    plain = RaceSide(PLAIN, DrafterKind.NONE.value, 0)
    total = request.max_tokens
    planned = 2 * math.ceil(total / block_tokens)
    blocks: list[Block] = []
    last_told = 0.0

    def tell(side: str, force: bool = False) -> None:
        nonlocal last_told
        now = time.monotonic()
        if progress is not None and (force or now - last_told >= PROGRESS_SECONDS):
            last_told = now
            progress(
                RaceProgress(
                    len(blocks) + (0 if force else 1),
                    max(planned, len(blocks)),
                    side,
                    len(spec.tokens),
                    len(plain.tokens),
                    total,
                    spec.seconds,
                    plain.seconds,
                )
            )

    runtime.recall(prompt)  # a kept state of this prompt spares reading it again (untimed either way)
    turn = 0
    while not (spec.done(total) and plain.done(total)):
        for run in (spec, plain) if turn % 2 == 0 else (plain, spec):
            if run.done(total):
                continue
            tokens, seconds = len(run.tokens), run.seconds
            run.block(runtime, prompt, params, min(block_tokens, total - tokens), cancel, partial(tell, run.side))
            if cancel.cancelled or run.reason is FinishReason.CANCELLED:
                return None
            blocks.append(Block(run.side, len(run.tokens) - tokens, round(run.seconds - seconds, 4)))
            tell(run.side, force=True)
        turn += 1
    record = RaceRecord(
        spec.record(),
        plain.record(),
        blocks,
        drafter,
        request.depth,
        runtime.target_name,
        expected_rate=request.expected_rate,
    )
    record.drift = drift_note(request.expected_rate, record.plain.tokens_per_second)
    record.reply_fork = first_difference(request.spec_pieces, spec.pieces)
    record.fork = fork_of(runtime, prompt, plain, spec.pieces)
    return record


def fork_of(runtime: Runtime, prompt: list[int], plain: RaceSide, spec_pieces: Sequence[str]) -> Fork | None:
    """Where ``plain`` first leaves ``spec_pieces``, with the target's view there (None: the same text).

    The target's largest logit there is read again (the cache cut back to that position, one token decoded).
    """
    index = first_difference(spec_pieces, plain.pieces)
    if index is None:
        return None
    tokens, pieces, tops = plain.tokens, plain.pieces, plain.tops
    plain_piece = pieces[index] if index < len(pieces) else ""
    spec_piece = spec_pieces[index] if index < len(spec_pieces) else ""
    offset = len("".join(pieces[:index]))
    top = tops[index] if index < len(tops) else ()
    gap: float | None = None
    scale: float | None = None
    sync = getattr(runtime.target_context, "sync", None)  # a local context; a remote target cannot be probed
    if top and index < len(tokens) and index < len(spec_pieces) and sync is not None:
        # The row plain decoding chose from: the cache cut back to that position.
        row, _ = sync([*prompt, *tokens[:index]])
        scale = float(np.abs(row).max())
        match = next((p for text, p in top if text == spec_piece), None)
        if match is not None and match > 0:
            gap = math.log(top[0][1] / match)
    return Fork(index, offset, plain_piece, spec_piece, top[:5], gap, scale)
