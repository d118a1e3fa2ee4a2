"""Statistical checks shared by the sampling tests."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

Z_999 = 3.09  # the 99.9% quantile of the standard normal


def assert_follows(seen: Counter[int], ids: np.ndarray, probs: np.ndarray, n: int) -> None:
    """Fail unless ``seen`` (``n`` draws) fits the distribution ``ids``/``probs`` by a chi-square test at 99.9%.

    Cells expected to hold fewer than five draws are pooled; the chi-square quantile uses the
    Wilson-Hilferty approximation.
    """
    assert set(seen) <= {int(t) for t in ids}
    chi2, cells = 0.0, 0
    pooled_expected, pooled_seen = 0.0, 0
    for token, prob in zip(ids, probs, strict=True):
        expected, got = n * float(prob), seen.get(int(token), 0)
        if expected >= 5:
            chi2 += (got - expected) ** 2 / expected
            cells += 1
        else:
            pooled_expected += expected
            pooled_seen += got
    if pooled_expected >= 5:
        chi2 += (pooled_seen - pooled_expected) ** 2 / pooled_expected
        cells += 1
    dof = cells - 1
    assert dof >= 2, (ids, probs)
    limit = dof * (1 - 2 / (9 * dof) + Z_999 * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < limit, (chi2, dof, seen.most_common())
