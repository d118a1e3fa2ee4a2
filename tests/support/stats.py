"""Statistical checks shared by the sampling tests."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import numpy as np

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
