"""Plain decoding's speed on a loaded pair: the baseline a reply's speed-up is measured against.

A baseline belongs to one pair *and* the settings that change plain decoding's
speed (sampler, context size, GPU layers); one measured under other settings
is never used. It is measured with the engine's own counters (generated tokens
over generation time, the prompt excluded), exactly as a reply's tokens/s is.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from specchat.core.cancel import CancelToken
from specchat.core.types import DrafterKind, Finished, GenerationParams, SamplerParams

if TYPE_CHECKING:
    from specchat.core.chat.session import ChatEngine

CALIBRATION_PROMPT = "Write a short paragraph about the sea."
CALIBRATION_TOKENS = 48
MIN_TOKENS_FOR_RATIO = 16  # fewer generated tokens say nothing about a rate
MAX_BASELINES = 64  # kept in the settings file; every pair, sampler and context size makes one


def baseline_key(pair_key: str, sampler: SamplerParams, n_ctx: int, gpu_layers: str) -> str:
    """What a baseline is valid for: the pair and every setting that moves plain decoding's speed."""
    return (f"{pair_key}|ctx={n_ctx}|gpu={gpu_layers}|T={sampler.temperature:g}|k={sampler.top_k}"
            f"|p={sampler.top_p:g}|rp={sampler.repeat_penalty:g}")


@dataclass(frozen=True)
class Baseline:
    """Plain decoding's measured rate, what it is valid for and when it was taken."""

    key: str
    tokens_per_second: float
    tokens: int
    measured_at: float  # time.time()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Baseline | None:
        """A stored baseline, or None for anything else (older formats included)."""
        if not isinstance(data, dict):
            return None
        try:
            b = cls(str(data["key"]), float(data["tokens_per_second"]), int(data["tokens"]),
                    float(data["measured_at"]))
        except (KeyError, TypeError, ValueError):
            return None
        return b if b.tokens_per_second > 0 and b.tokens > 0 else None

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


def measure_plain(engine: ChatEngine, key: str, sampler: SamplerParams, cancel: CancelToken,
                  max_tokens: int = CALIBRATION_TOKENS) -> Baseline | None:
    """Decode a fixed prompt with no drafter and time it; None if cancelled or too short to mean anything."""
    from specchat.core.chat.session import ChatSession

    params = GenerationParams(sampler=sampler, max_tokens=max_tokens, seed=0)
    finished: Finished | None = None
    for event in ChatSession(engine).reply(CALIBRATION_PROMPT, params, drafter=DrafterKind.NONE, cancel=cancel):
        if isinstance(event, Finished):
            finished = event
    if finished is None or cancel.cancelled or finished.stats.generated < MIN_TOKENS_FOR_RATIO:
        return None
    return Baseline(key, finished.stats.tokens_per_second, finished.stats.generated, time.time())
