"""The shared vocabulary: events the engine yields, parameters, statistics.

Everything that crosses from the engine to a front end (terminal, GUI,
benchmark) is one of the frozen dataclasses below.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias


class SpecchatError(Exception):
    """A problem the user can fix; ``str(error)`` is a one-line message."""


class PromptTooLongError(SpecchatError):
    """A prompt of ``tokens`` tokens (at least, where ``at_least``) that the context of ``n_ctx`` cannot hold."""

    def __init__(self, message: str, *, tokens: int, n_ctx: int, at_least: bool = False) -> None:
        super().__init__(message)
        self.tokens, self.n_ctx, self.at_least = tokens, n_ctx, at_least


class TokenKind(str, enum.Enum):
    """The fate of one token in a reply."""

    PENDING = "pending"  # drafted, not yet checked by the target
    ACCEPTED = "accepted"  # drafted and accepted by the target
    REJECTED = "rejected"  # drafted and rejected (shown, never part of the text)
    TARGET = "target"  # the target's own token: correction or bonus


class FinishReason(str, enum.Enum):
    EOS = "eos"
    MAX_TOKENS = "max_tokens"
    STOP_STRING = "stop_string"
    CANCELLED = "cancelled"
    CONTEXT_FULL = "context_full"
    ERROR = "error"


class DrafterKind(str, enum.Enum):
    DRAFT_MODEL = "draft"  # the file loaded with --draft: a draft model, or a head (registry.entry_for)
    NGRAM = "ngram"
    MTP = "mtp"  # the target's own multi-token-prediction (NextN) heads
    COMPOSITE = "composite"  # per round: n-gram lookup, the model drafter, or a lookup span continued by it
    EAGLE3 = "eagle3"  # an EAGLE-3 head reading the target's hidden states
    DFLASH = "dflash"  # a DFlash (or DFlash2) block-diffusion head
    DSPARK = "dspark"  # a DSpark head: DFlash with a Markov head and a confidence head
    NONE = "none"


class DraftSource(str, enum.Enum):
    """Who drafted one token.

    A new drafter names its own source in its module, ``source = DraftSource("name")`` (the name of its
    registry entry): the first call makes the member, every later one returns the same object.
    """

    MODEL = "model"  # the draft model
    MTP = "mtp"  # the target's own MTP heads
    LOOKUP = "lookup"  # n-gram lookup in the conversation (or the lookup memory)

    @classmethod
    def _missing_(cls, value: object) -> DraftSource | None:
        if not isinstance(value, str) or not value.isidentifier() or value != value.lower():
            return None  # Enum raises its ValueError
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        return cls._value2member_map_.setdefault(value, member)  # type: ignore[return-value]


@dataclass(frozen=True)
class TextSource:
    """A text the user or client already holds, drafted from by lookup: an attached document or a prediction.

    ``name`` is what the fates show of a token drafted from it ("report.pdf", "the prediction"); lookup
    searches ``text`` beside the conversation for one reply (``Runtime.stream(..., sources=...)``).
    """

    name: str
    text: str
    kind: Literal["prediction", "attachment"]


PREDICTION_NAME = "the prediction"
"""The name a prediction sent over the API or the terminal drafts under."""


MAX_DEPTH = 16
DEFAULT_DEPTH: int | None = None  # auto: the adaptive controller; the one default everywhere


@dataclass(frozen=True)
class SamplerParams:
    """Sampler settings; the same settings shape both the target's p and the draft's q."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise SpecchatError(f"temperature must be 0 or more, got {self.temperature}")
        if self.top_k < 0:
            raise SpecchatError(f"top-k must be 0 (off) or more, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecchatError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise SpecchatError(f"min-p must be in [0, 1), got {self.min_p}")
        if not self.repeat_penalty > 0.0:
            raise SpecchatError(f"repeat penalty must be above 0, got {self.repeat_penalty}")
        if self.repeat_last_n < 0:
            raise SpecchatError(f"repeat-last-n must be 0 or more, got {self.repeat_last_n}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class GenerationParams:
    """What to generate: sampler, limits, stops and seed."""

    sampler: SamplerParams = field(default_factory=SamplerParams)
    max_tokens: int = 512
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    # Stop drafting when the draft's top probability falls below this. 0: no gate, for every drafter;
    # None: each drafter's default (no gate; 0.75 for MTP heads, drafters.MTP_P_MIN).
    draft_p_min: float | None = None
    # At temperature > 0 the draft normally samples from its own q (the exact rule's premise).
    # True drafts the draft's argmax instead, as llama.cpp's server does; still lossless
    # (q is then one-hot), but far fewer drafts are accepted. Kept for comparison.
    greedy_draft: bool = False
    # After the reply, time this many tokens of plain decoding from where it ended (0: none): its speed-up's
    # like-for-like denominator, GenerationStats.plain_tokens_per_second. The reply's own tokens are unchanged.
    plain_probe: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise SpecchatError(f"max tokens must be at least 1, got {self.max_tokens}")
        if self.plain_probe < 0:
            raise SpecchatError(f"the plain probe must be 0 or more tokens, got {self.plain_probe}")
        if self.draft_p_min is not None and not 0.0 <= self.draft_p_min < 1.0:
            raise SpecchatError(f"draft p-min must be in [0, 1), got {self.draft_p_min}")


def parse_depth(value: str | int) -> int | None:
    """Parse a speculation depth: an int 0..MAX_DEPTH, or ``"auto"`` (returned as None)."""
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return None
        try:
            value = int(value)
        except ValueError:
            raise SpecchatError(f"depth must be a number 0-{MAX_DEPTH} or 'auto', got {value!r}") from None
    if not 0 <= value <= MAX_DEPTH:
        raise SpecchatError(f"depth must be between 0 and {MAX_DEPTH} or 'auto', got {value}")
    return value


GPU_LAYERS_AUTO: Literal["auto"] = "auto"
GpuLayers: TypeAlias = int | Literal["auto"]
"""Layers to offload, in llama.cpp's convention (-1 all, 0 none, n the last n), or "auto": fit free memory."""
MAX_GPU_LAYERS = 10_000


def parse_gpu_layers(value: str | int) -> GpuLayers:
    """Parse a GPU-layer setting: ``"auto"``, ``"all"`` (-1), or a whole number -1..MAX_GPU_LAYERS."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word == GPU_LAYERS_AUTO:
            return GPU_LAYERS_AUTO
        if word == "all":
            return -1
        try:
            value = int(word)
        except ValueError:
            raise SpecchatError(f"GPU layers must be a number, 'all' or 'auto', got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= MAX_GPU_LAYERS:
        raise SpecchatError(
            f"GPU layers must be -1 (all), 0 (none) up to {MAX_GPU_LAYERS}, 'all' or 'auto', got {value!r}"
        )
    return value


TopEntry: TypeAlias = tuple[int, float, str]
"""One alternative at a position: token id, probability, its text."""


@dataclass(frozen=True)
class Drafted:
    """The drafter's proposal for one round, before the target has seen it."""

    round: int
    tokens: tuple[int, ...]
    pieces: tuple[str, ...]
    draft_probs: tuple[float, ...]
    # Per drafted token: who drafted it, and for lookup the length of the match it continued (0 otherwise).
    sources: tuple[DraftSource, ...] = ()
    match_lengths: tuple[int, ...] = ()
    # Per drafted token: the name of the text a lookup drafted it from (a TextSource's name); "" for the
    # conversation (and the lookup memory) and for every draft that is not a lookup's. Empty: all "".
    origins: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verified:
    """The target's verdict on one round's drafts.

    ``accepted`` is a prefix of the drafted tokens, ``rejected`` the rest of
    them; ``correction`` is the target's own token (replacing the first
    rejected draft, or the bonus after a full accept), or None when the reply
    ended inside the accepted run (end of generation, max tokens).
    """

    round: int
    # The depth the round asked for; with a drafter that picks its own length under a cap (the composite), what
    # it drafted. 0 with a drafter selected: a plain round, chosen because drafting was not paying (Auto), or
    # nothing to draft.
    depth: int
    accepted: tuple[int, ...]
    rejected: tuple[int, ...]
    correction: int | None
    accepted_pieces: tuple[str, ...]
    rejected_pieces: tuple[str, ...]
    correction_piece: str
    # Per drafted token (accepted then rejected): the target's and the draft's probability of it.
    target_probs: tuple[float, ...]
    draft_probs: tuple[float, ...]
    # Probability of the correction token under the target's distribution.
    correction_prob: float = 1.0
    # Per drafted token (accepted then rejected): who drafted it, and its lookup match length (0: not lookup).
    sources: tuple[DraftSource, ...] = ()
    match_lengths: tuple[int, ...] = ()
    # Per drafted token (accepted then rejected): the text a lookup drafted it from, as in Drafted.origins.
    origins: tuple[str, ...] = ()
    # The X-ray's data: the top alternatives (token id, probability, text), most likely first. ``target_top``
    # has one entry per drafted position plus one for the position after them (where the correction or the
    # bonus is chosen); ``draft_top`` one per drafted token (a lookup draft's is its token at 1.0).
    target_top: tuple[tuple[TopEntry, ...], ...] = ()
    draft_top: tuple[tuple[TopEntry, ...], ...] = ()
    greedy: bool = False  # decided at temperature 0 (argmax match) rather than by the exact rule
    # Seconds from the start of the reply's first round (after its prompt) to this verdict, on the engine's clock.
    elapsed: float = field(default=0.0, compare=False)

    @property
    def n_accepted(self) -> int:
        return len(self.accepted)

    def drafted_from(self, origin: str) -> tuple[int, int]:
        """How many of this round's drafts came from the text named ``origin``: (accepted, rejected)."""
        n = len(self.accepted)
        accepted = sum(1 for o in self.origins[:n] if o == origin)
        return accepted, sum(1 for o in self.origins[n:] if o == origin)

    @property
    def committed(self) -> tuple[int, ...]:
        """Tokens this round added to the reply, in order."""
        return self.accepted + (() if self.correction is None else (self.correction,))

    @property
    def text(self) -> str:
        return "".join(self.accepted_pieces) + self.correction_piece


RATE_DIGITS = 2  # decimals a stored rate keeps (GenerationStats.as_dict): a reply shows the same figures reopened


@dataclass
class ReplyCounts:
    """The counters every record of one reply shares, declared once.

    The engine's :class:`GenerationStats`, the window's ``ReplyFigures`` (core/chat/transcript.py) and bench's
    reports (cli/bench.py) count and derive these the same way; the stored names are these field names.
    """

    rounds: int = 0  # verify passes that checked at least one drafted token
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    depth: int = 0  # the last round's draft depth
    # Per source (DraftSource value): [drafted, accepted].
    by_source: dict[str, list[int]] = field(default_factory=dict)

    def count_source(self, source: DraftSource, drafted: int, accepted: int) -> None:
        """Add one round's drafted and accepted tokens of ``source``."""
        counts = self.by_source.setdefault(source.value, [0, 0])
        counts[0] += drafted
        counts[1] += accepted

    def source_dict(self) -> dict[str, dict[str, int]]:
        """Drafted and accepted tokens per source, for JSON output."""
        return {name: {"drafted": d, "accepted": a} for name, (d, a) in sorted(self.by_source.items())}

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        """Accepted drafts per drafted round (rounds at depth 0 draft nothing and are not counted)."""
        return self.accepted / self.rounds if self.rounds else 0.0

    def rates_dict(self) -> dict[str, float]:
        """The two rates as they are stored and reported: acceptance to 4 decimals, accepted per round to 3."""
        return {
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_per_round": round(self.mean_accepted_per_round, 3),
        }


@dataclass
class GenerationStats(ReplyCounts):
    """The engine's figures for one reply: the shared counters, the prompt, and the time each part took."""

    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generate_seconds: float = 0.0
    # Plain decoding's rate predicted from this pair's measured verify cost for one
    # token (measured when some round ran at depth 0, else extrapolated); 0 = unknown.
    plain_tokens_per_second_estimate: float = 0.0
    # Plain decoding timed right after the reply at its context length (GenerationParams.plain_probe) over
    # plain_tokens tokens; 0 = not timed.
    plain_tokens_per_second: float = 0.0
    plain_tokens: int = 0

    @property
    def tokens_per_second(self) -> float:
        return self.generated / self.generate_seconds if self.generate_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        rates = self.rates_dict()
        return {
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "generated": self.generated,
            "acceptance_rate": rates["acceptance_rate"],
            "tokens_per_second": round(self.tokens_per_second, RATE_DIGITS),
            "mean_accepted_per_round": rates["mean_accepted_per_round"],
            "prompt_tokens": self.prompt_tokens,
            "reused_prompt_tokens": self.reused_prompt_tokens,
            "prompt_seconds": round(self.prompt_seconds, 4),
            "wall_seconds": round(self.prompt_seconds + self.generate_seconds, 4),
            "depth": self.depth,
            "plain_tokens_per_second_estimate": round(self.plain_tokens_per_second_estimate, RATE_DIGITS),
            "plain_tokens_per_second": round(self.plain_tokens_per_second, RATE_DIGITS),
            "plain_tokens": self.plain_tokens,
        }


@dataclass(frozen=True)
class Finished:
    """The last event of a reply."""

    reason: FinishReason
    stats: GenerationStats
    message: str = ""


Event = Drafted | Verified | Finished


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` share from their start."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
