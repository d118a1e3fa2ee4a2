"""The conversation as the app holds it: messages with their token spans, and a reply's figures.

No Qt here. The window keeps one ``Transcript`` and folds each engine event
into it once; the chat view draws from it, the stats panel shows its live
figures, the store's writer saves the spans it returns, and requests are built
from its ``history``, never from a widget. ``ReplyFigures`` counts the way the
engine does: ``rounds`` are the rounds that drafted something, ``passes``
every verify pass.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from specchat.core.chat.attachments import Attachment, prompt_text
from specchat.core.engine.lookup import INSERTED, REPLACED
from specchat.core.engine.positions import PositionCounts
from specchat.core.engine.verify import TOP_N
from specchat.core.types import Drafted, DraftSource, Finished, GenerationStats, ReplyCounts, TokenKind, Verified

_PACK_DEFAULTS: tuple[Any, ...] = (1, None, None, "")  # judged, correction, replaced, origin: left out when so
_SOURCES = {None, *(s.value for s in DraftSource)}


@dataclass(frozen=True)
class TokenDetail:
    """What the token X-ray shows of one token beyond its span: where it stood, who drafted it, the alternatives."""

    position: int  # draft position in its round, from 1; 0 for the target's own token
    source: DraftSource | None = None  # who drafted it; None for the target's own token
    match_length: int = 0  # a lookup draft's: how many tokens the match it continued was long (lookup.INSERTED...)
    greedy: bool = False  # judged at temperature 0 (argmax match), not by the exact rule
    target_top: tuple[tuple[str, float], ...] = ()  # the target's likeliest tokens at this position (text, p)
    draft_top: tuple[tuple[str, float], ...] = ()  # the draft's, for a drafted token (text, q)
    judged: bool = True  # False for a draft after the round's first rejection: the target never judged it
    correction: str | None = None  # the first rejected draft's: the token the target chose in its place
    replaced: str | None = None  # the target's own token: the rejected draft it replaced (None: a bonus)
    origin: str = ""  # a lookup draft's text: an attachment's name, "the prediction"; "" for the conversation

    def as_dict(self) -> dict[str, Any]:
        """A readable JSON-able form, for exports."""
        return {
            "position": self.position,
            "source": None if self.source is None else self.source.value,
            "match_length": self.match_length,
            "greedy": self.greedy,
            "target_top": [list(pair) for pair in self.target_top],
            "draft_top": [list(pair) for pair in self.draft_top],
            "judged": self.judged,
            "correction": self.correction,
            "replaced": self.replaced,
            "origin": self.origin,
        }

    def pack(self) -> list[Any]:
        """A compact JSON-able form (probabilities to the 3 decimals shown), read back by :meth:`unpack`."""

        def flat(top: tuple[tuple[str, float], ...]) -> list[Any]:
            return [x for text, p in top for x in (text, round(p, 3))]

        packed = [
            self.position,
            self.source.value if self.source else None,
            self.match_length,
            int(self.greedy),
            flat(self.target_top),
            flat(self.draft_top),
            int(self.judged),
            self.correction,
            self.replaced,
            self.origin,
        ]
        while len(packed) > 6 and packed[-1] == _PACK_DEFAULTS[len(packed) - 7]:  # the common tail left out
            packed.pop()
        return packed

    @classmethod
    def unpack(cls, data: Any) -> TokenDetail | None:
        """The detail :meth:`pack` gave, or None for anything else; top lists longer than ``TOP_N`` are cut."""
        if not isinstance(data, list) or not 6 <= len(data) <= 10:
            return None
        position, source, match, greedy, target, draft, judged, correction, replaced, origin = [
            *data,
            *_PACK_DEFAULTS[len(data) - 6 :],
        ]

        def pairs(flat: object) -> tuple[tuple[str, float], ...] | None:
            if not isinstance(flat, list):
                return None
            out = tuple(zip(flat[: 2 * TOP_N : 2], flat[1 : 2 * TOP_N : 2], strict=False))
            ok = all(isinstance(text, str) and _finite(p) and 0 <= p <= 1 for text, p in out)
            return tuple((text, float(p)) for text, p in out) if ok else None

        targets, drafts = pairs(target), pairs(draft)
        if (
            not _count(position)
            or not (_count(match) or match in (INSERTED, REPLACED))  # a guess of where a copy resumes: negative
            or targets is None
            or drafts is None
            or not all(isinstance(x, str) or x is None for x in (source, correction, replaced))
            or not isinstance(origin, str)
            or source not in _SOURCES
        ):
            return None
        return cls(
            position,
            DraftSource(source) if source else None,
            match,
            bool(greedy),
            targets,
            drafts,
            bool(judged),
            correction,
            replaced,
            origin,
        )


@dataclass(frozen=True)
class TokenSpan:
    """One shown token (or run of text) and its fate."""

    kind: TokenKind
    text: str
    round: int = -1
    target_prob: float | None = None
    draft_prob: float | None = None
    detail: TokenDetail | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "text": self.text,
            "round": self.round,
            "target_prob": self.target_prob,
            "draft_prob": self.draft_prob,
            **({"detail": self.detail.as_dict()} if self.detail is not None else {}),
        }


def spans_of(verified: Verified) -> list[TokenSpan]:
    """The spans a verified round shows: accepted drafts, rejected drafts, then the target's token."""
    spans: list[TokenSpan] = []
    n_acc = len(verified.accepted_pieces)
    drafted = list(verified.accepted_pieces) + list(verified.rejected_pieces)
    details = _details(verified)
    for i, piece in enumerate(drafted):
        kind = TokenKind.ACCEPTED if i < n_acc else TokenKind.REJECTED
        tp = verified.target_probs[i] if i < len(verified.target_probs) else None
        dp = verified.draft_probs[i] if i < len(verified.draft_probs) else None
        spans.append(TokenSpan(kind, piece, verified.round, tp, dp, details[i] if details else None))
    if verified.correction is not None or verified.correction_piece:
        spans.append(
            TokenSpan(
                TokenKind.TARGET,
                verified.correction_piece,
                verified.round,
                verified.correction_prob,
                None,
                details[-1] if details else None,
            )
        )
    return spans


def _details(verified: Verified) -> list[TokenDetail]:
    """Per shown span of ``verified`` (accepted, rejected, then the target's token): its X-ray detail.

    Empty when the event carries none (it was made without the engine's top lists).
    """
    n_drafted = len(verified.draft_top)
    if not verified.target_top or len(verified.target_top) != n_drafted + 1 or len(verified.sources) != n_drafted:
        return []
    judged = n_drafted - len(verified.rejected)  # the verdict's accepted count (the reply may end inside it)
    positions = [*range(1, len(verified.accepted) + 1), *range(judged + 1, n_drafted + 1)]

    def named(top: tuple[tuple[int, float, str], ...]) -> tuple[tuple[str, float], ...]:
        return tuple((text, p) for _, p, text in top)

    correction = None
    if verified.correction is not None:
        names = {t: text for t, _, text in verified.target_top[judged]}
        correction = names.get(verified.correction, verified.correction_piece)
    out = [
        TokenDetail(
            pos,
            verified.sources[pos - 1],
            verified.match_lengths[pos - 1] if verified.match_lengths else 0,
            verified.greedy,
            named(verified.target_top[pos - 1]),
            named(verified.draft_top[pos - 1]),
            pos <= judged + 1,
            correction if pos == judged + 1 else None,
            origin=verified.origins[pos - 1] if len(verified.origins) == n_drafted else "",
        )
        for pos in positions
    ]
    replaced = verified.rejected_pieces[0] if verified.rejected_pieces else None
    out.append(TokenDetail(0, None, 0, verified.greedy, named(verified.target_top[judged]), replaced=replaced))
    return out


def span_count(verified: Verified) -> int:
    """How many spans ``spans_of(verified)`` gives, without building them."""
    extra = 1 if verified.correction is not None or verified.correction_piece else 0
    return len(verified.accepted_pieces) + len(verified.rejected_pieces) + extra


@dataclass
class ReplyFigures(ReplyCounts):
    """Counters of one reply, updated event by event; ``final`` holds the engine's own at the end.

    The counters shared with the engine's figures (rounds, drafted, accepted, generated, depth, by_source) are
    :class:`~specchat.core.types.ReplyCounts`'; these are the window's additions.
    """

    passes: int = 0
    per_round: list[tuple[int, int, int]] = field(default_factory=list)  # (round, depth, accepted) per pass
    first_token_seconds: float = 0.0  # from when decoding began to the first verified round
    # Seconds the reply waited for the runtime (a served request held it) before decoding began; not part of
    # ``first_token_seconds``, said beside it.
    waited_seconds: float = 0.0
    final: GenerationStats | None = None
    finish_reason: str | None = None
    final_message: str = ""  # the Finished event's message (an error's one line)
    # Verify passes by what drafted them: "plain", "lookup", "model", "mtp" or "splice" (two sources in one
    # round: the model's drafts continued by a lookup).
    round_kinds: dict[str, int] = field(default_factory=dict)
    # Lookup drafts by the text they came from: name -> [drafted, accepted]; "" is the conversation.
    by_origin: dict[str, list[int]] = field(default_factory=dict)
    positions: PositionCounts = field(default_factory=PositionCounts)  # acceptance by draft position
    # Per verified round: seconds from the first round's start to its verdict (the engine's clock),
    # committed tokens and characters of text; a race replays these (core/chat/race.py).
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    sampler: dict[str, float] | None = None  # the reply's sampler settings (SamplerParams fields), set at its start
    race: dict[str, Any] | None = None  # plain decoding raced on this reply (core/chat/race_record.py's RaceRecord)
    # The reply's drafting at its start: {"drafter": a registry name, "depth": an int, or None for auto}; a race
    # drafts the same way (core/chat/race.py). None: not recorded.
    drafting: dict[str, Any] | None = None
    max_tokens: int = 0  # the token limit the reply (or its last continuation) ran under; 0: not recorded
    started: float = field(default_factory=time.monotonic, repr=False, compare=False)
    # While a continuation streams: the engine's figures of the reply before it, added to the continuation's.
    carried: GenerationStats | None = field(default=None, repr=False, compare=False)
    resumed_first_token_seconds: float = field(default=0.0, repr=False, compare=False)  # the continuation's wait
    resumed_waited_seconds: float = field(default=0.0, repr=False, compare=False)  # ... for the runtime
    # A continuation's rounds are numbered on from the reply's (its engine counts from 0 again).
    round_offset: int = field(default=0, repr=False, compare=False)

    def fold(self, events: Iterable[object]) -> bool:
        """Count ``events``; True when a verified round changed the counters."""
        changed = False
        for event in events:
            if isinstance(event, Verified):
                drafted = len(event.accepted) + len(event.rejected)
                self.passes += 1
                self.rounds += 1 if drafted else 0
                self.drafted += drafted
                self.accepted += len(event.accepted)
                self.generated += len(event.committed)
                self.depth = event.depth
                self.per_round.append((event.round, event.depth, len(event.accepted)))
                self._count_sources(event)
                self.positions.add(drafted, drafted - len(event.rejected))
                offset = self.carried.generate_seconds + self.carried.prompt_seconds if self.carried else 0.0
                self.timeline.append((offset + event.elapsed, len(event.committed), len(event.text)))
                if self.passes == 1:
                    self.first_token_seconds = time.monotonic() - self.started - self.waited_seconds
                if self.carried is not None and self.generated == self.carried.generated + len(event.committed):
                    self.resumed_first_token_seconds = time.monotonic() - self.started - self.resumed_waited_seconds
                changed = True
            elif isinstance(event, Drafted):
                self.depth = len(event.tokens)
            elif isinstance(event, Finished):
                if event.stats != GenerationStats():  # the front end's own Finished (closed, failed) has none
                    self.final = event.stats if self.carried is None else combined(self.carried, event.stats)
                elif self.carried is not None:
                    self.final = self.carried
                self.finish_reason = event.reason.value
                self.final_message = event.message
        return changed

    def decoding_began(self) -> None:
        """The reply had waited for the runtime (a served request held it) and decodes now: the wait so far is
        counted apart from the time to its first token."""
        waited = max(0.0, time.monotonic() - self.started)
        if self.carried is None:
            if not self.passes:
                self.waited_seconds = waited
        elif self.generated == self.carried.generated:
            self.resumed_waited_seconds = waited

    def resume(self, max_tokens: int) -> None:
        """Go on counting for a continuation of this reply: its figures add to these."""
        self.carried = self.final or GenerationStats(
            rounds=self.rounds,
            drafted=self.drafted,
            accepted=self.accepted,
            generated=self.generated,
            depth=self.depth,
            by_source={name: list(counts) for name, counts in self.by_source.items()},
        )
        self.final = None
        self.finish_reason = None
        self.final_message = ""
        self.race = None  # a race ran on the shorter reply
        self.max_tokens = max_tokens
        self.started = time.monotonic()
        self.round_offset = max((r for r, _, _ in self.per_round), default=-1) + 1

    def _count_sources(self, event: Verified) -> None:
        for i, source in enumerate(event.sources):
            self.count_source(source, 1, 1 if i < len(event.accepted) else 0)
            if source is DraftSource.LOOKUP and len(event.origins) == len(event.sources):
                counts = self.by_origin.setdefault(event.origins[i], [0, 0])
                counts[0] += 1
                counts[1] += 1 if i < len(event.accepted) else 0
        kinds = set(event.sources)
        if not kinds:
            kind = "plain" if not (event.accepted or event.rejected) else "unlabelled"
        elif len(kinds) > 1:
            kind = "splice"
        else:
            kind = kinds.pop().value
        self.round_kinds[kind] = self.round_kinds.get(kind, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        """The engine's figures once finished; until then the counters so far (stored with a streaming reply)."""
        extra = {
            "passes": self.passes,
            "first_token_seconds": round(self.first_token_seconds, 3),
            "per_round": [list(r) for r in self.per_round],
            "positions": self.positions.as_list(),
            "by_source": self.source_dict(),
            "timeline": [[round(t, 4), n, c] for t, n, c in self.timeline],
        }
        extra.update(
            {
                key: value
                for key, value in (
                    ("sampler", self.sampler),
                    ("race", self.race),
                    ("max_tokens", self.max_tokens),
                    ("drafting", self.drafting),
                    ("waited_seconds", round(self.waited_seconds, 3)),
                    ("by_origin", {name: list(c) for name, c in sorted(self.by_origin.items())}),
                )
                if value
            }
        )
        if self.final is not None:
            return {**self.final.as_dict(), **extra}
        return {
            **extra,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "generated": self.generated,
            **self.rates_dict(),
            "depth": self.depth,
        }

    @classmethod
    def from_dict(cls, stats: dict[str, Any] | None, problems: list[str] | None = None) -> ReplyFigures:
        """Figures of a stored reply (its ``stats`` column); a value of the wrong type or out of range is skipped.

        The keys of the values skipped are added to ``problems`` (pass a list to learn them).
        """
        figures = cls()
        if not stats:
            return figures
        read = _StatsReader(stats, problems if problems is not None else [])
        figures.passes = read.count("passes")
        figures.first_token_seconds = read.seconds("first_token_seconds")
        figures.waited_seconds = read.seconds("waited_seconds")
        figures.per_round = read.rows("per_round", (int, int, int))
        figures.rounds = read.count("rounds")
        figures.drafted = read.count("drafted")
        figures.accepted = read.count("accepted")
        figures.generated = read.count("generated")
        figures.depth = read.count("depth")
        figures.max_tokens = read.count("max_tokens")
        figures.positions = PositionCounts.from_list(stats.get("positions"))  # absent before the X-ray
        figures.timeline = read.rows("timeline", (float, int, int))
        sampler = read.of_type("sampler", dict)
        if sampler is not None:
            figures.sampler = {str(k): float(v) for k, v in sampler.items() if _finite(v)}
        figures.race = read.of_type("race", dict)  # checked when shown (race_record.RaceRecord.from_dict)
        figures.drafting = read.of_type("drafting", dict)  # checked where a race reads it (race.RaceRequest)
        by_source = read.of_type("by_source", dict) or {}
        figures.by_source = {
            str(name): [c.get("drafted", 0), c.get("accepted", 0)]
            for name, c in by_source.items()
            if isinstance(c, dict) and all(_count(c.get(key, 0)) for key in ("drafted", "accepted"))
        }
        if len(figures.by_source) < len(by_source):
            read.problems.append("by_source")
        by_origin = read.of_type("by_origin", dict) or {}
        figures.by_origin = {
            str(name): [int(c[0]), int(c[1])]
            for name, c in by_origin.items()
            if isinstance(c, list) and len(c) == 2 and all(_count(x) for x in c) and c[1] <= c[0]
        }
        if len(figures.by_origin) < len(by_origin):
            read.problems.append("by_origin")
        tps = read.seconds("tokens_per_second")
        if tps > 0:
            figures.final = GenerationStats(
                by_source={name: list(counts) for name, counts in figures.by_source.items()},
                rounds=figures.rounds,
                drafted=figures.drafted,
                accepted=figures.accepted,
                generated=figures.generated,
                prompt_tokens=read.count("prompt_tokens"),
                reused_prompt_tokens=read.count("reused_prompt_tokens"),
                prompt_seconds=read.seconds("prompt_seconds"),
                generate_seconds=figures.generated / tps,
                depth=figures.depth,
                plain_tokens_per_second_estimate=read.seconds("plain_tokens_per_second_estimate"),
                plain_tokens_per_second=read.seconds("plain_tokens_per_second"),
                plain_tokens=read.count("plain_tokens"),
            )
        return figures


def combined(before: GenerationStats, after: GenerationStats) -> GenerationStats:
    """The engine's figures of a reply and of its continuation, as one reply's.

    Counts and times add up; the prompt is the first part's (the continuation's prompt held the reply so far),
    and the depth and plain decoding's timing are the continuation's, the latest.
    """
    by_source = {name: list(counts) for name, counts in before.by_source.items()}
    for name, (drafted, accepted) in after.by_source.items():
        counts = by_source.setdefault(name, [0, 0])
        counts[0] += drafted
        counts[1] += accepted
    return GenerationStats(
        rounds=before.rounds + after.rounds,
        drafted=before.drafted + after.drafted,
        accepted=before.accepted + after.accepted,
        generated=before.generated + after.generated,
        prompt_tokens=before.prompt_tokens or after.prompt_tokens,
        reused_prompt_tokens=before.reused_prompt_tokens if before.prompt_tokens else after.reused_prompt_tokens,
        prompt_seconds=before.prompt_seconds + after.prompt_seconds,
        generate_seconds=before.generate_seconds + after.generate_seconds,
        depth=after.depth,
        plain_tokens_per_second_estimate=after.plain_tokens_per_second_estimate,
        plain_tokens_per_second=after.plain_tokens_per_second,
        plain_tokens=after.plain_tokens,
        by_source=by_source,
    )


_MAX_COUNT = 1 << 62


def _finite(value: object) -> bool:
    """True for a finite int or float (a bool is no number)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: object) -> bool:
    """True for a whole number from 0 to 2**62."""
    return type(value) is int and 0 <= value <= _MAX_COUNT


@dataclass
class _StatsReader:
    """Reads one stored ``stats`` object; every key whose value is unusable goes to ``problems``."""

    stats: dict[str, Any]
    problems: list[str]

    def _get(self, key: str, ok: Callable[[Any], bool], default: Any) -> Any:
        value = self.stats.get(key, default)
        if value is None or ok(value):
            return default if value is None else value
        self.problems.append(key)
        return default

    def count(self, key: str) -> int:
        return int(self._get(key, _count, 0))

    def seconds(self, key: str) -> float:
        """A finite number of at least 0 (seconds, a rate)."""
        return float(self._get(key, lambda v: _finite(v) and v >= 0, 0.0))

    def of_type(self, key: str, kind: type) -> Any:
        return self._get(key, lambda v: isinstance(v, kind), None)

    def rows(self, key: str, kinds: tuple[type, ...]) -> list[tuple[Any, ...]]:
        """A list of same-length rows of counts (``int``) or seconds (``float``); unusable rows are skipped."""
        rows = self.of_type(key, list) or []

        def usable(row: object) -> bool:
            return (
                isinstance(row, list)
                and len(row) == len(kinds)
                and all(_count(x) if kind is int else _finite(x) and x >= 0 for x, kind in zip(row, kinds, strict=True))
            )

        out = [tuple(kind(x) for x, kind in zip(row, kinds, strict=True)) for row in rows if usable(row)]
        if len(out) < len(rows):
            self.problems.append(key)
        return out


@dataclass
class Message:
    """One message; ``spans`` is None for plain text (user messages, replies without token fates)."""

    role: str
    text: str = ""
    spans: list[TokenSpan] | None = None
    finished: bool = True
    finish_reason: str | None = None  # as stored; None on a finished reply means it was cut short
    figures: ReplyFigures | None = None
    id: int | None = None  # the stored message's id (None until stored)
    version: int = 1  # which version at this place (regenerated replies, edited messages), 1-based
    versions: int = 1
    attachments: list[Attachment] = field(default_factory=list)  # files attached to a user message

    @property
    def prompt(self) -> str:
        """The message as the model reads it: its attachments' text, then its own."""
        return prompt_text(self.content, self.attachments)

    @property
    def content(self) -> str:
        """The message's text (rejected drafts are not part of it)."""
        if self.spans is None:
            return self.text
        return "".join(s.text for s in self.spans if s.kind is not TokenKind.REJECTED)


class Transcript:
    """The messages of the open conversation, with the streaming reply last while it runs."""

    def __init__(self, messages: Iterable[Message] = (), system_prompt: str = "") -> None:
        self.messages: list[Message] = list(messages)
        self.system_prompt = system_prompt  # sent first, through the chat template; not a shown message

    @property
    def streaming(self) -> bool:
        return bool(self.messages) and not self.messages[-1].finished

    @property
    def reply(self) -> Message | None:
        """The last message if it is an assistant reply."""
        return self.messages[-1] if self.messages and self.messages[-1].role == "assistant" else None

    def totals(self) -> tuple[int, int, float]:
        """Replies, generated tokens and generation seconds over the conversation."""
        replies = [m.figures for m in self.messages if m.role == "assistant" and m.figures is not None]
        seconds = sum(f.final.generate_seconds for f in replies if f.final is not None)
        return len(replies), sum(f.generated for f in replies), seconds

    def positions(self) -> PositionCounts:
        """Acceptance by draft position over the conversation's replies (see ``position_acceptance``)."""
        total = PositionCounts()
        for m in self.messages:
            if m.role == "assistant" and m.figures is not None:
                total.merge(m.figures.positions)
        return total

    def history(self, upto: int | None = None) -> list[dict[str, str]]:
        """The system prompt and the first ``upto`` messages (all by default), for the chat template."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": m.role, "content": m.prompt} for m in self.messages[:upto]]

    def attachments(self, upto: int | None = None) -> list[Attachment]:
        """The files attached to the first ``upto`` messages (all by default), in order."""
        return [a for m in self.messages[:upto] for a in m.attachments]

    def add_user(self, text: str, attachments: Iterable[Attachment] = ()) -> Message:
        message = Message("user", text, attachments=list(attachments))
        self.messages.append(message)
        return message

    def begin_reply(self) -> Message:
        message = Message("assistant", spans=[], finished=False, figures=ReplyFigures())
        self.messages.append(message)
        return message

    def can_continue(self) -> bool:
        """The last message is a finished reply with its token fates, cut at the token limit."""
        reply = self.reply
        return (
            reply is not None
            and reply.finished
            and reply.finish_reason == "max_tokens"
            and reply.spans is not None
            and reply.figures is not None
        )

    def resume_reply(self, max_tokens: int) -> Message | None:
        """Reopen the last reply (cut at the token limit) to stream its continuation into; None if it cannot."""
        if not self.can_continue():
            return None
        reply = self.reply
        assert reply is not None and reply.figures is not None
        reply.finished = False
        reply.finish_reason = None
        reply.figures.resume(max_tokens)
        return reply

    def fold(self, event: object) -> list[TokenSpan]:
        """Apply one engine event to the streaming reply; the spans a verified round added."""
        reply = self.reply
        if reply is None or reply.finished:
            return []
        assert reply.figures is not None and reply.spans is not None
        if isinstance(event, Verified) and reply.figures.round_offset:  # a continuation's
            event = dataclasses.replace(event, round=event.round + reply.figures.round_offset)
        reply.figures.fold([event])
        if isinstance(event, Verified):
            spans = spans_of(event)
            reply.spans.extend(spans)
            return spans
        if isinstance(event, Finished):
            reply.finished = True
            reply.finish_reason = event.reason.value
        return []
