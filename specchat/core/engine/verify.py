"""Acceptance rules as pure functions.

Both return ``(n_accepted, next_token)``: the drafts ``[:n_accepted]`` are
kept and ``next_token`` is the target's own token that follows them (the
correction for the first rejected draft, or the bonus after a full accept).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specchat.core.engine.sampling import Distribution, residual


def accept_greedy(drafts: Sequence[int], target_choice: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: keep drafts while they equal the target's argmax.

    ``target_choice[i]`` is the target's greedy token after the committed
    text plus ``drafts[:i]``; it needs entries up to the first mismatch (or
    ``len(drafts) + 1`` entries after a full match).
    """
    n = 0
    while n < len(drafts) and drafts[n] == target_choice[n]:
        n += 1
    return n, int(target_choice[n])


def accept_rejection(
    drafts: Sequence[int],
    p: Sequence[Distribution],
    q: Sequence[Distribution],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """The exact rule of Leviathan et al. 2023 / Chen et al. 2023.

    ``drafts[i]`` was sampled from ``q[i]``; ``p`` has one more entry than
    ``drafts`` (the target's distribution after a full accept). Accept draft
    x with probability min(1, p(x)/q(x)); on the first rejection sample from
    norm(max(0, p - q)); after a full accept sample the bonus from p.
    The output token sequence is distributed exactly as sampling from p.
    """
    for i, x in enumerate(drafts):
        px = p[i].prob(x)
        qx = q[i].prob(x)
        if qx <= 0.0:
            # Cannot happen for a draft sampled from q; treat as a rejection.
            return i, residual(p[i], q[i]).sample(rng)
        if px >= qx or rng.random() < px / qx:
            continue
        return i, residual(p[i], q[i]).sample(rng)
    return len(drafts), p[len(drafts)].sample(rng)
