"""Plain decoding's speed on a loaded pair: the baseline a reply's speed-up is measured against.

A baseline belongs to one pair *and* the settings that change plain decoding's
speed (sampler, context size, GPU layers); one measured under other settings
is never used. It is measured with the engine's own counters (generated tokens
over generation time, the prompt excluded), exactly as a reply's tokens/s is.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from specchat.core.cancel import CancelToken
from specchat.core.types import DrafterKind, Finished, GenerationParams, SamplerParams

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import Runtime

PROBE_TOKENS = 16  # plain tokens timed after each of the window's replies (GenerationParams.plain_probe)
CEILING_SLACK = 1.1  # timing noise a ratio may show above its ceiling before it counts as impossible
CALIBRATION_PROMPT = "Write a short paragraph about the sea."
CALIBRATION_TOKENS = 48
MIN_TOKENS_FOR_RATIO = 16  # fewer generated tokens say nothing about a rate
MAX_BASELINES = 64  # kept in the settings file; every pair, sampler and context size makes one


def baseline_key(pair_key: str, sampler: SamplerParams, n_ctx: int, gpu_layers: str) -> str:
    """What a baseline is valid for: the pair and every setting that moves plain decoding's speed."""
    return (
        f"{pair_key}|ctx={n_ctx}|gpu={gpu_layers}|T={sampler.temperature:g}|k={sampler.top_k}"
        f"|p={sampler.top_p:g}|rp={sampler.repeat_penalty:g}"
    )


@dataclass(frozen=True)
class Baseline:
    """Plain decoding's measured rate, what it is valid for and when it was taken."""

    key: str
    tokens_per_second: float
    tokens: int
    measured_at: float  # time.time()
    # The pair's quiet rate under these settings, when faster than this figure: the fastest plain decoding
    # measured lately (core/chat/busy.py keeps it); 0: this figure is the quiet one.
    quiet_tokens_per_second: float = 0.0
    quiet_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def quiet(self) -> tuple[float, float]:
        """The pair's quiet plain rate under these settings and when it was measured."""
        if self.quiet_tokens_per_second > self.tokens_per_second:
            return self.quiet_tokens_per_second, self.quiet_at
        return self.tokens_per_second, self.measured_at

    @classmethod
    def from_json(cls, data: object) -> Baseline | None:
        """A stored baseline, or None for anything else (older formats included)."""
        if not isinstance(data, dict):
            return None
        try:
            b = cls(str(data["key"]), float(data["tokens_per_second"]), int(data["tokens"]), float(data["measured_at"]))
        except (KeyError, TypeError, ValueError):
            return None
        if not (b.tokens_per_second > 0 and b.tokens > 0):
            return None
        try:  # absent before the busy note, and ignored when it does not read as a rate and a time
            quiet, at = float(data.get("quiet_tokens_per_second", 0.0)), float(data.get("quiet_at", 0.0))
        except (TypeError, ValueError):
            return b
        return replace(b, quiet_tokens_per_second=quiet, quiet_at=at) if math.isfinite(quiet + at) else b

    def age(self, now: float | None = None) -> str:
        """``just now``, ``5 min ago``, ``3 h ago``, ``2 days ago``."""
        seconds = max(0.0, (time.time() if now is None else now) - self.measured_at)
        if seconds < 60:
            return "just now"
        if seconds < 3600:
            return f"{seconds // 60:.0f} min ago"
        if seconds < 86400:
            return f"{seconds // 3600:.0f} h ago"
        return f"{seconds // 86400:.0f} days ago"


def remember(baselines: dict[str, Any], baseline: Baseline, limit: int = MAX_BASELINES) -> dict[str, Any]:
    """``baselines`` (key -> stored form) with ``baseline`` added, keeping the ``limit`` newest."""
    kept = {k: v for k, v in baselines.items() if k != baseline.key and Baseline.from_json(v) is not None}
    newest = sorted(kept.items(), key=lambda kv: float(kv[1]["measured_at"]), reverse=True)[: max(0, limit - 1)]
    return {**dict(newest), baseline.key: baseline.to_json()}


def measure_plain(
    runtime: Runtime, key: str, sampler: SamplerParams, cancel: CancelToken, max_tokens: int = CALIBRATION_TOKENS
) -> Baseline | None:
    """Decode a fixed prompt with no drafter and time it; None if cancelled or too short to mean anything."""
    from specchat.core.runtime.conversation import Conversation

    params = GenerationParams(sampler=sampler, max_tokens=max_tokens, seed=0)
    finished: Finished | None = None
    for event in Conversation(runtime).reply(CALIBRATION_PROMPT, params, drafter=DrafterKind.NONE, cancel=cancel):
        if isinstance(event, Finished):
            finished = event
    if finished is None or cancel.cancelled or finished.stats.generated < MIN_TOKENS_FOR_RATIO:
        return None
    return Baseline(key, finished.stats.tokens_per_second, finished.stats.generated, time.time())


def speedup_ceiling(generated: int, passes: int) -> float:
    """The most a reply can gain over plain decoding: its tokens per target pass.

    A verify pass never costs less than plain decoding's one-token pass and
    drafting costs something, so a reply that took ``passes`` passes for
    ``generated`` tokens is at most ``generated / passes`` times as fast.
    """
    return generated / passes if passes > 0 else 0.0


@dataclass(frozen=True)
class SpeedUp:
    """A reply's speed-up over plain decoding as shown: a ratio only where it means what it says."""

    ratio: float | None  # None: no trustworthy figure (``why`` says which)
    why: str

    @property
    def text(self) -> str:
        return f"×{self.ratio:.2f} measured" if self.ratio is not None else "not measured"


def reply_speedup(
    generated: int, passes: int, tokens_per_second: float, plain_tokens_per_second: float, plain_tokens: int
) -> SpeedUp:
    """This reply's tokens/s over plain decoding timed right after it (its probe), checked against its ceiling."""
    if generated < MIN_TOKENS_FOR_RATIO or tokens_per_second <= 0:
        return SpeedUp(
            None, f"Shown for replies of {MIN_TOKENS_FOR_RATIO} tokens or more: fewer say nothing about a rate."
        )
    if plain_tokens_per_second <= 0:
        return SpeedUp(
            None,
            "Plain decoding was not timed after this reply (it was stopped, or saved by an "
            "earlier version). Race it for a side-by-side figure.",
        )
    ratio = tokens_per_second / plain_tokens_per_second
    ceiling = speedup_ceiling(generated, passes)
    if ratio > ceiling * CEILING_SLACK:
        return SpeedUp(
            None,
            f"×{ratio:.2f} would be more than this reply's rounds allow (×{ceiling:.2f}, its "
            f"tokens per target pass): the machine's speed changed between the reply and the "
            "plain run after it. Race it for a side-by-side figure.",
        )
    return SpeedUp(
        ratio,
        f"This reply's {tokens_per_second:.1f} tokens/s over plain decoding's "
        f"{plain_tokens_per_second:.1f}, timed on this pair over {plain_tokens} tokens right "
        "after the reply, at its context length.",
    )
