"""Racing plain decoding against a finished greedy reply: the plain run, its record, and the first difference.

A race decodes the reply's prompt again with the target alone (no drafter),
with the reply's own sampler and its length as the limit, and times every
round the way the reply's figures do (``ReplyFigures.timeline``: seconds from
the first round's start to each verdict, on the engine's clock). Both streams
can then be replayed side by side at their real pace, later too: the record
is stored with the reply. Times count from each run's first round, so reading
the prompt is left out of both (the plain run finds the prompt in the cache
the reply left behind).

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.types import (
    DrafterKind,
    Finished,
    FinishReason,
    GenerationParams,
    SamplerParams,
    SpecchatError,
    TokenKind,
    Verified,
)

from .transcript import Message, ReplyFigures, TokenSpan

if TYPE_CHECKING:
    from .session import ChatEngine

RECORD_VERSION = 1
_LATEST_RECORD = 1e11  # seconds since 1970 a stored record may say it was made at (the year 5138)
TIE_RELATIVE_GAP = 1e-3  # the same bound as the greedy identity tests
CONTEXT_CHARS = 40  # text shown on either side of a first difference
Timeline = list[tuple[float, int, int]]  # per round: seconds since the first round started, tokens, characters


def committed_pieces(spans: Sequence[TokenSpan]) -> list[str]:
    """One text piece per committed token of a reply (rejected drafts left out)."""
    return [s.text for s in spans if s.kind in (TokenKind.ACCEPTED, TokenKind.TARGET)]


def verified_pieces(event: Verified) -> list[str]:
    """One text piece per token a verified round committed."""
    return list(event.accepted_pieces) + ([event.correction_piece] if event.correction is not None else [])


def first_difference(a: Sequence[str], b: Sequence[str]) -> int | None:
    """The first token index where two replies' pieces differ (one ending early counts); None if identical."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def finish_seconds(timeline: Timeline) -> float:
    """When the last round's verdict came, from the first round's start."""
    return timeline[-1][0] if timeline else 0.0


@dataclass(frozen=True)
class Fork:
    """Where the plain run first left the speculative reply, and what the target thought there."""

    index: int  # token index in the reply
    offset: int  # characters of text both share before it
    plain_piece: str
    spec_piece: str
    top: tuple[tuple[str, float], ...] = ()  # the target's likeliest tokens there (text, probability), plain's view
    gap: float | None = None  # logit gap between plain's choice and the reply's (None: not among ``top``)
    scale: float | None = None  # the largest |logit| at that position

    @property
    def tie(self) -> bool:
        """True when the two choices were within float noise of each other."""
        return self.gap is not None and self.scale is not None and self.gap < TIE_RELATIVE_GAP * self.scale

    def describe(self) -> str:
        """One line: tie or divergence, where, and the target's two best choices there."""
        kind = "a float tie" if self.tie else "a real divergence"
        if self.gap is None and self.scale is None:
            kind = "a difference"  # nothing recorded to tell a tie from a divergence
        best = ", ".join(f"{text!r} {p:.3f}" for text, p in self.top[:2])
        line = f"first difference at token {self.index}: plain {self.plain_piece!r}, speculative {self.spec_piece!r}"
        line += f"; {kind}"
        if best:
            line += f" (the target's two best there: {best}"
            line += f"; logit gap {self.gap:.3g} against logits up to {self.scale:.3g})" if (
                self.gap is not None and self.scale is not None) else ")"
        return line


@dataclass
class RaceRecord:
    """The plain run of one race, as stored with the reply (``ReplyFigures.race``)."""

    text: str
    timeline: Timeline
    first_token_seconds: float
    finish_reason: str
    target: str = ""  # the target model's file name
    recorded_at: float = field(default_factory=time.time)
    fork: Fork | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"v": RECORD_VERSION, "text": self.text, "timeline": [list(r) for r in self.timeline],
                "first_token_seconds": self.first_token_seconds, "finish_reason": self.finish_reason,
                "target": self.target, "recorded_at": self.recorded_at,
                "fork": None if self.fork is None else asdict(self.fork)}

    @classmethod
    def from_dict(cls, data: object) -> RaceRecord | None:
        """A stored record, or None for anything unreadable (a newer or damaged one)."""
        if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
            return None
        try:
            timeline = [(float(t), int(n), int(c)) for t, n, c in data["timeline"]]
            if not all(math.isfinite(t) and t >= 0 for t, _, _ in timeline):
                return None
            fork_data = data.get("fork")
            fork = None
            if isinstance(fork_data, dict):
                top = tuple((str(text), float(p)) for text, p in fork_data.get("top", ()))
                fork = Fork(int(fork_data["index"]), int(fork_data["offset"]), str(fork_data["plain_piece"]),
                            str(fork_data["spec_piece"]), top, _float_or_none(fork_data.get("gap")),
                            _float_or_none(fork_data.get("scale")))
            record = cls(str(data["text"]), timeline, float(data["first_token_seconds"]), str(data["finish_reason"]),
                         str(data.get("target", "")), float(data.get("recorded_at", 0.0)), fork)
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        if not (0 <= record.first_token_seconds < math.inf and 0 <= record.recorded_at <= _LATEST_RECORD):
            return None  # NaN fails both
        return record

    @property
    def finish_seconds(self) -> float:
        return finish_seconds(self.timeline)


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


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
    """What the plain run needs: the conversation before the reply, the reply's sampler, length and pieces."""

    message_id: int
    history: list[dict[str, str]]
    sampler: SamplerParams
    max_tokens: int
    spec_pieces: tuple[str, ...]

    @classmethod
    def for_reply(cls, message: Message, history: list[dict[str, str]]) -> RaceRequest:
        """The request for a raceable stored ``message`` whose prompt is ``history``."""
        refusal = race_refusal(message)
        figures = message.figures
        sampler = reply_sampler(figures) if figures is not None else None
        if refusal or figures is None or sampler is None or message.id is None:
            raise SpecchatError(f"cannot race this reply: {refusal or 'it is not stored yet'}")
        return cls(message.id, history, sampler, figures.generated, tuple(committed_pieces(message.spans or [])))


def run_race(engine: ChatEngine, request: RaceRequest, cancel: CancelToken) -> RaceRecord | None:
    """Decode ``request``'s prompt with the target alone and time it; None if cancelled. Use on the engine's thread."""
    from .session import ChatSession

    session = ChatSession(engine, request.history)
    params = GenerationParams(sampler=request.sampler, max_tokens=request.max_tokens, seed=0)
    figures = ReplyFigures()  # folds the timeline exactly as a reply's figures do
    pieces: list[str] = []
    tops: list[tuple[tuple[str, float], ...]] = []
    finished: Finished | None = None
    for event in session.reply(None, params, drafter=DrafterKind.NONE, cancel=cancel):
        figures.fold([event])
        if isinstance(event, Verified):
            pieces.extend(verified_pieces(event))
            last = event.target_top[-1] if event.target_top else ()
            tops.append(tuple((text, p) for _, p, text in last))
        elif isinstance(event, Finished):
            finished = event
    if cancel.cancelled or finished is None or finished.reason is FinishReason.CANCELLED:
        return None
    if finished.reason is FinishReason.ERROR:
        raise SpecchatError(finished.message or "the plain run failed")
    timeline = [(round(t, 4), n, c) for t, n, c in figures.timeline]  # 0.1 ms: as a reply's figures are stored
    record = RaceRecord("".join(pieces), timeline, round(figures.first_token_seconds, 4), finished.reason.value,
                        engine.target_name)
    index = first_difference(request.spec_pieces, pieces)
    if index is not None:
        _, prompt = engine.tokenize_prompt(request.history)
        record.fork = _fork(engine, prompt, session.last_tokens, index, pieces, request.spec_pieces, tops)
    return record


def _fork(engine: ChatEngine, prompt: list[int], tokens: list[int], index: int, pieces: list[str],
          spec_pieces: Sequence[str], tops: list[tuple[tuple[str, float], ...]]) -> Fork:
    """The first difference, with the target's view there (its largest logit read again, one token decoded)."""
    plain_piece = pieces[index] if index < len(pieces) else ""
    spec_piece = spec_pieces[index] if index < len(spec_pieces) else ""
    offset = len("".join(pieces[:index]))
    top = tops[index] if index < len(tops) else ()
    gap: float | None = None
    scale: float | None = None
    sync = getattr(engine.target_context, "sync", None)  # a local context; a remote target cannot be probed
    if top and index < len(tokens) and index < len(spec_pieces) and sync is not None:
        # The row plain decoding chose from: the cache the plain run left, cut back to that position.
        row, _ = sync([*prompt, *tokens[:index]])
        scale = float(np.abs(row).max())
        match = next((p for text, p in top if text == spec_piece), None)
        if match is not None and match > 0:
            gap = math.log(top[0][1] / match)
    return Fork(index, offset, plain_piece, spec_piece, top[:5], gap, scale)


def fork_context(spec_text: str, plain_text: str, fork: Fork) -> tuple[str, str, str]:
    """The shared text before a fork and each side's text from it on, a few words each."""
    start = max(0, fork.offset - CONTEXT_CHARS)
    before = ("…" if start else "") + spec_text[start:fork.offset]
    return (before, spec_text[fork.offset:fork.offset + CONTEXT_CHARS],
            plain_text[fork.offset:fork.offset + CONTEXT_CHARS])


def summary(spec_seconds: float, plain_seconds: float) -> str:
    """Both finish times and the ratio, in words."""
    line = f"speculative finished in {spec_seconds:.2f} s, plain in {plain_seconds:.2f} s"
    if spec_seconds <= 0 or plain_seconds <= 0:
        return line
    ratio = plain_seconds / spec_seconds
    return line + (f": {ratio:.2f}\u00d7 faster" if ratio >= 1 else f": {ratio:.2f}\u00d7, speculation was slower")
