"""Statistical checks shared by the sampling tests."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from specchat.core.engine.depth import DepthControl
from specchat.core.engine.sampling import distribution
from specchat.core.types import GenerationParams, SamplerParams, Verified

Z_999 = 3.09  # the 99.9% quantile of the standard normal


def assert_fits(cells: Iterable[tuple[float, int]], n: int, *, min_dof: int = 2, show: object = None) -> None:
    """Fail unless observed counts fit expected ones by a chi-square test at 99.9%.

    ``cells`` are ``(expected, seen)`` pairs out of ``n`` draws; cells expected to hold fewer than
    five draws, and whatever no cell covers, are pooled into one. The chi-square quantile uses the
    Wilson-Hilferty approximation.
    """
    big = [(e, s) for e, s in cells if e >= 5]
    chi2 = sum((s - e) ** 2 / e for e, s in big)
    pooled_expected = n - sum(e for e, _ in big)
    pooled_seen = n - sum(s for _, s in big)
    k = len(big)
    if pooled_expected >= 5:
        chi2 += (pooled_seen - pooled_expected) ** 2 / pooled_expected
        k += 1
    dof = k - 1
    assert dof >= min_dof, (dof, show)
    limit = dof * (1 - 2 / (9 * dof) + Z_999 * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < limit, (chi2, dof, show)


def assert_follows(seen: Counter[int], ids: np.ndarray, probs: np.ndarray, n: int) -> None:
    """Fail unless ``seen`` (``n`` draws of one token) fits the distribution ``ids``/``probs``."""
    assert set(seen) <= {int(t) for t in ids}
    assert_fits(
        ((n * float(p), seen.get(int(t), 0)) for t, p in zip(ids, probs, strict=True)), n, show=seen.most_common()
    )


def assert_pairs_follow_the_target(
    ctx: Any, prompt: Sequence[int], sampler: SamplerParams, pairs: Counter[tuple[int, int]], n: int
) -> None:
    """Fail unless the first two tokens of ``n`` sampled replies (``pairs``) fit the exact joint p(x1) p(x2 | x1)
    of the target context ``ctx`` alone after ``prompt`` (small cells pooled, as :func:`assert_fits` does)."""
    ctx.truncate(0)
    p1 = distribution(ctx.decode(prompt)[0].copy(), [], sampler)
    cells = []
    for x1 in p1.ids:
        ctx.truncate(0)
        ctx.decode(prompt)
        p2 = distribution(ctx.decode([int(x1)])[0].copy(), [], sampler)
        cells += [
            (n * p1.prob(int(x1)) * float(q), pairs.get((int(x1), int(x2)), 0))
            for x2, q in zip(p2.ids, p2.probs, strict=True)
        ]
    assert np.isclose(sum(e for e, _ in cells), n)
    assert_fits(cells, n, min_dof=3, show=pairs.most_common(8))


def batched_pairs(
    batched: Any, prompt: Sequence[int], sampler: SamplerParams, n: int, width: int, drafter: str
) -> tuple[Counter[tuple[int, int]], int]:
    """The first two tokens of ``n`` seeded replies to ``prompt`` decoded ``width`` at a time in ``batched`` (a
    :class:`~specchat.core.runtime.batched.BatchedRuntime`) drafting with ``drafter``, and the drafts judged."""
    pairs: Counter[tuple[int, int]] = Counter()
    drafted = 0
    for start in range(0, n, width):
        got: dict[int, list[int]] = {}
        for seed in range(start, start + width):
            params = GenerationParams(sampler=sampler, max_tokens=2, seed=seed)
            key, _ = batched.admit(prompt, params, drafter=drafter, depth=DepthControl(3))
            got[key] = []
        while batched.active:
            for key, event in batched.step():
                if isinstance(event, Verified):
                    got[key].extend(event.committed)
                    drafted += len(event.accepted) + len(event.rejected)
        for tokens in got.values():
            pairs[(tokens[0], tokens[1])] += 1
    return pairs, drafted
