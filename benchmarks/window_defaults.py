"""The demo pair loaded with the window's default reply settings, for the benchmarks that compare with the window."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime
from specchat.core.settings import Settings
from specchat.core.types import GenerationParams, SamplerParams

ROOT = Path(__file__).resolve().parents[1]
TEST_PROMPTS = ROOT / "tests" / "data" / "prompts.jsonl"


@dataclass
class WindowSetup:
    target: Path
    runtime: Runtime
    settings: Settings
    sampler: SamplerParams
    params: GenerationParams


def window_setup(
    max_tokens: int, n_ctx: int = 2048, n_threads: int | None = None, draft: Path | None = None
) -> WindowSetup:
    """The demo pair's runtime (``draft``: another draft model) and the window's defaults (greedy, repeat
    penalty 1.1, auto depth)."""
    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, draft or pair.draft, n_ctx=n_ctx, n_threads=n_threads)
    params = window_setup_params(max_tokens)
    return WindowSetup(pair.target, runtime, Settings(), params.sampler, params)


def window_setup_params(max_tokens: int) -> GenerationParams:
    """The window's default reply settings (greedy, repeat penalty 1.1) for replies of ``max_tokens``."""
    s = Settings()
    sampler = SamplerParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, repeat_penalty=s.repeat_penalty)
    return GenerationParams(sampler=sampler, max_tokens=max_tokens)
