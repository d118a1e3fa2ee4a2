"""Micro-benchmark: Python work per logits row with a Qwen-sized (152k) vocabulary.

Prints the median time per call for the sampler paths the engine runs every
round. Synthetic logits; no model needed.

    python benchmarks/sampler_micro.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from specchat.core.engine.sampling import distribution, greedy_token
from specchat.core.types import SamplerParams

VOCAB = 152_064


def median_ms(fn: Callable[[np.ndarray], object], rows: list[np.ndarray], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        for row in rows:
            t = time.perf_counter()
            fn(row)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    rng = np.random.default_rng(0)
    # Realistic rows: a few strong candidates over a long noisy tail.
    rows = []
    for _ in range(200):
        row = rng.normal(0, 2.0, VOCAB).astype(np.float32)
        row[rng.integers(0, VOCAB, 5)] += rng.uniform(6, 12, 5).astype(np.float32)
        rows.append(row)
    cases = {
        "temperature + top-k 40 + top-p 0.95 + min-p 0.05 (defaults)": SamplerParams(
            temperature=0.8, top_k=40, top_p=0.95, min_p=0.05
        ),
        "temperature + top-k 40 + top-p 0.95 (no min-p)": SamplerParams(
            temperature=0.8, top_k=40, top_p=0.95, min_p=0.0
        ),
        "temperature only, no truncation (full softmax)": SamplerParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0),
    }
    print(f"vocabulary {VOCAB}, median of {len(rows) * 5} calls")
    for name, params in cases.items():

        def sample(row: np.ndarray, p: SamplerParams = params) -> object:
            return distribution(row, [], p)

        print(f"  {name:<62} {median_ms(sample, rows):7.3f} ms")
    greedy = SamplerParams()
    print(f"  {'greedy check (argmax)':<62} {median_ms(lambda r: greedy_token(r, [], greedy), rows):7.3f} ms")
    print(
        f"  {'reference: plain numpy full softmax':<62} "
        f"{median_ms(lambda r: np.exp(r - r.max()) / np.exp(r - r.max()).sum(), rows):7.3f} ms"
    )


if __name__ == "__main__":
    main()
