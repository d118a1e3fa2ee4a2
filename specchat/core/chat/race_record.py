"""A race as stored with a reply: both runs' round times, their interleaved blocks, the first difference, drift.

Both runs of a race are decoded now, block by block in turn
(core/chat/race.py), so each run's timeline is seconds of its own decoding
from its first round, the other run's blocks and every prompt read left out.
The record keeps the two timelines (replayed side by side), the blocks in
the order they ran, what the speculative run drafted with, and the plain
rate measured before the race against which the race's own plain rate is
checked (``drift``: the machine's speed moved more than the noise).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from specchat.core.engine.verify import TIE_RELATIVE_GAP  # the identity tests' bound too
from specchat.core.types import TokenKind

from .transcript import TokenSpan

RECORD_VERSION = 2  # 1: the plain run only, timed after the reply (read as no record: the reply can race again)
_LATEST_RECORD = 1e11  # seconds since 1970 a stored record may say it was made at (the year 5138)
CONTEXT_CHARS = 40  # text shown on either side of a first difference
# How far the race's plain rate may stand from the one measured before it (either way) and still count as the
# same machine: a 16-token probe on a quiet machine repeats within about 10%, and plain decoding slows a little
# with the context's length (the baseline's prompt is not the reply's); more than this is the machine's load.
DRIFT_FACTOR = 1.3
SPECULATIVE, PLAIN = "speculative", "plain"
Timeline = list[tuple[float, int, int]]  # per round: seconds since the first round started, tokens, characters
Fates = list[tuple[int, str]]  # runs of committed text: characters, "a" (accepted drafts) or "t" (the target's)


def committed_pieces(spans: Sequence[TokenSpan]) -> list[str]:
    """One text piece per committed token of a reply (rejected drafts left out)."""
    return [s.text for s in spans if s.kind in (TokenKind.ACCEPTED, TokenKind.TARGET)]


def first_difference(a: Sequence[str], b: Sequence[str]) -> int | None:
    """The first token index where two replies' pieces differ (one ending early counts); None if identical."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def finish_seconds(timeline: Timeline) -> float:
    """When the last round's verdict came, from the first round's start."""
    return timeline[-1][0] if timeline else 0.0


def drift_note(expected_rate: float, plain_rate: float) -> str:
    """One line when ``plain_rate`` (the race's) departs from ``expected_rate`` by more than the noise, else ""."""
    if expected_rate <= 0 or plain_rate <= 0:
        return ""
    factor = plain_rate / expected_rate
    if 1 / DRIFT_FACTOR <= factor <= DRIFT_FACTOR:
        return ""
    return (
        f"The machine's speed changed: plain decoding ran at {plain_rate:.1f} tokens/s in this race against "
        f"{expected_rate:.1f} tokens/s measured before it (\u00d7{factor:.2f}). Run the race again."
    )


@dataclass(frozen=True)
class Fork:
    """Where the plain run first left the speculative one, and what the target thought there."""

    index: int  # token index in the reply
    offset: int  # characters of text both share before it
    plain_piece: str
    spec_piece: str
    top: tuple[tuple[str, float], ...] = ()  # the target's likeliest tokens there (text, probability), plain's view
    gap: float | None = None  # logit gap between plain's choice and the speculative one (None: not among ``top``)
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
            line += (
                f"; logit gap {self.gap:.3g} against logits up to {self.scale:.3g})"
                if (self.gap is not None and self.scale is not None)
                else ")"
            )
        return line

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fork:
        top = tuple((str(text), float(p)) for text, p in data.get("top", ()))
        return cls(
            int(data["index"]),
            int(data["offset"]),
            str(data["plain_piece"]),
            str(data["spec_piece"]),
            top,
            _float_or_none(data.get("gap")),
            _float_or_none(data.get("scale")),
        )


@dataclass
class RaceRun:
    """One side of a race: its text, its rounds' times, its wait for the first token, why it ended."""

    text: str
    timeline: Timeline
    first_token_seconds: float  # reading the prompt (if its block read it) and the first round
    finish_reason: str
    fates: Fates = field(default_factory=list)  # the speculative run's: which text its drafts wrote

    @property
    def finish_seconds(self) -> float:
        return finish_seconds(self.timeline)

    @property
    def tokens(self) -> int:
        return sum(n for _, n, _ in self.timeline)

    @property
    def tokens_per_second(self) -> float:
        seconds = self.finish_seconds
        return self.tokens / seconds if seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "timeline": [list(r) for r in self.timeline],
            "first_token_seconds": self.first_token_seconds,
            "finish_reason": self.finish_reason,
            "fates": [list(f) for f in self.fates],
        }

    @classmethod
    def from_dict(cls, data: object) -> RaceRun:
        """A stored run; raises ValueError (or KeyError, TypeError) for anything impossible."""
        if not isinstance(data, dict):
            raise ValueError("not a run")
        timeline = [(float(t), int(n), int(c)) for t, n, c in data["timeline"]]
        fates = [(int(n), str(kind)) for n, kind in data.get("fates", [])]
        run = cls(str(data["text"]), timeline, float(data["first_token_seconds"]), str(data["finish_reason"]), fates)
        if not all(math.isfinite(t) and t >= 0 and n >= 0 and c >= 0 for t, n, c in timeline):
            raise ValueError("an impossible round time")
        if not 0 <= run.first_token_seconds < math.inf or not all(n >= 0 and k in "at" for n, k in fates):
            raise ValueError("an impossible figure")
        return run


class Block(NamedTuple):
    """One block of a race as it ran: which run, how many tokens it decoded, in how many seconds."""

    side: str  # SPECULATIVE or PLAIN
    tokens: int
    seconds: float


@dataclass
class RaceRecord:
    """A race stored with the reply (``ReplyFigures.race``): both runs, timed side by side."""

    spec: RaceRun
    plain: RaceRun
    blocks: list[Block] = field(default_factory=list)  # in the order they ran
    drafter: str = ""  # the speculative run's drafter (a registry name)
    depth: int | None = None  # its depth (None: auto)
    target: str = ""  # the target model's file name
    recorded_at: float = field(default_factory=time.time)
    fork: Fork | None = None  # where the two runs' texts first differ
    reply_fork: int | None = None  # the first token where the speculative run left the stored reply (None: same)
    expected_rate: float = 0.0  # plain tokens/s measured before the race (the reply's probe, the pair's baseline)
    drift: str = ""  # one line when the race's plain rate departed from ``expected_rate`` by more than the noise

    @property
    def ratio(self) -> float:
        """Plain's finish time over the speculative run's: how many times faster speculation was (0: unknown)."""
        spec, plain = self.spec.finish_seconds, self.plain.finish_seconds
        return plain / spec if spec > 0 and plain > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "v": RECORD_VERSION,
            "spec": self.spec.as_dict(),
            "plain": self.plain.as_dict(),
            "blocks": [list(b) for b in self.blocks],
            "drafter": self.drafter,
            "depth": self.depth,
            "target": self.target,
            "recorded_at": self.recorded_at,
            "fork": None if self.fork is None else asdict(self.fork),
            "reply_fork": self.reply_fork,
            "expected_rate": self.expected_rate,
            "drift": self.drift,
        }

    @classmethod
    def from_dict(cls, data: object) -> RaceRecord | None:
        """A stored record, or None for anything unreadable (an older, newer or damaged one)."""
        if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
            return None
        try:
            blocks = [Block(str(side), int(n), float(s)) for side, n, s in data.get("blocks", [])]
            fork_data, depth, reply_fork = data.get("fork"), data.get("depth"), data.get("reply_fork")
            record = cls(
                RaceRun.from_dict(data["spec"]),
                RaceRun.from_dict(data["plain"]),
                blocks,
                str(data.get("drafter", "")),
                None if depth is None else int(depth),
                str(data.get("target", "")),
                float(data.get("recorded_at", 0.0)),
                Fork.from_dict(fork_data) if isinstance(fork_data, dict) else None,
                None if reply_fork is None else int(reply_fork),
                float(data.get("expected_rate", 0.0)),
                str(data.get("drift", "")),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        if not (
            0 <= record.recorded_at <= _LATEST_RECORD
            and 0 <= record.expected_rate < math.inf
            and all(
                b.side in (SPECULATIVE, PLAIN) and b.tokens >= 0 and 0 <= b.seconds < math.inf for b in record.blocks
            )
        ):
            return None  # NaN fails every comparison
        return record


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def fork_context(spec_text: str, plain_text: str, fork: Fork) -> tuple[str, str, str]:
    """The shared text before a fork and each side's text from it on, a few words each."""
    start = max(0, fork.offset - CONTEXT_CHARS)
    before = ("…" if start else "") + spec_text[start : fork.offset]
    return (
        before,
        spec_text[fork.offset : fork.offset + CONTEXT_CHARS],
        plain_text[fork.offset : fork.offset + CONTEXT_CHARS],
    )


def summary(spec_seconds: float, plain_seconds: float) -> str:
    """Both finish times and the ratio, in words."""
    line = f"speculative finished in {spec_seconds:.2f} s, plain in {plain_seconds:.2f} s"
    if spec_seconds <= 0 or plain_seconds <= 0:
        return line
    ratio = plain_seconds / spec_seconds
    return line + (f": {ratio:.2f}\u00d7 faster" if ratio >= 1 else f": {ratio:.2f}\u00d7, speculation was slower")
