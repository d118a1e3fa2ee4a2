"""The target's verdict on a round's drafts, for both acceptance rules, as pure functions.

:func:`judge` takes the target's logits after the last committed token and
after each draft, and returns one :class:`Verdict`: how many drafts are
kept, the target's own token that follows them (the correction for the
first rejected draft, or the bonus after a full accept), and the target's
probabilities the front ends show. At temperature 0 drafts are kept while
they equal the target's argmax (:func:`accept_greedy`); otherwise the exact
rejection-sampling rule decides (:func:`accept_rejection`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specchat.core.engine.sampling import Distribution, distribution, greedy_token, residual
from specchat.core.types import SamplerParams


@dataclass(frozen=True)
class Verdict:
    """What the target makes of one round's drafts."""

    n_accepted: int  # drafts[:n_accepted] are kept
    token: int  # the target's own token after them: the correction, or the bonus after a full accept
    target_probs: tuple[float, ...]  # the target's (sampler-shaped) probability of each draft
    token_prob: float  # the target's probability of ``token``
    # Per drafted position and one after them: the target's TOP_N likeliest (token, probability), likeliest first.
    target_top: tuple[tuple[tuple[int, float], ...], ...] = ()


TOP_N = 5
"""How many alternatives the X-ray shows per position."""

TIE_RELATIVE_GAP = 5e-2
"""A float tie: the target's two best tokens closer than this times the row's largest |logit|.

llama.cpp's kernels add in an order that depends on the batch, so the same
tokens read in one call or in several (a prompt cache's prefix, verify
batches against one token per call, a prompt's last token read alone) or at
another thread count give logits that differ in the last bits, and where the
two best tokens are closer than that, the argmax follows the batch shape.
``benchmarks/batch_shape_bound.py`` measures how far the gap between two
logits moves on the demo target (docs/benchmarks.md, "Batch shape"): up to
2.3e-3 of the largest logit on the public prompts; on documents of 1k-4k
tokens up to 2.0e-2 when the prompt's last token is read alone and 2.9e-2
when one-token decodes run at 2 threads instead of 1; far more only on a
degenerate prompt of one token repeated. This bound covers the real text
with room to spare. The race panel and the identity tests tell a tie from a
real divergence by it.
"""
_STRIDE = 64


def top(dist: Distribution, n: int = TOP_N) -> tuple[tuple[int, float], ...]:
    """The ``n`` likeliest tokens of ``dist`` with their probabilities, likeliest first (ties: lower id)."""
    probs = dist.probs
    size = len(probs)
    if size >= 16 * _STRIDE and n * 4 <= size // _STRIDE:
        # The n-th largest of a strided sample bounds the n-th largest from below: one pass over the
        # row instead of a partition of it (an untruncated distribution spans the whole vocabulary).
        sample = probs[::_STRIDE]
        idx = np.flatnonzero(probs >= np.partition(sample, len(sample) - n)[len(sample) - n])
    else:
        idx = np.arange(size)
    if len(idx) > n:  # the n largest and everything tied with the n-th, so that ties go to the lower id
        cand = probs[idx]
        idx = idx[cand >= np.partition(cand, len(cand) - n)[len(cand) - n]]
    idx = idx[np.lexsort((dist.ids[idx], -probs[idx]))][:n]
    return tuple((int(dist.ids[i]), float(probs[i])) for i in idx)


def judge(
    rows: np.ndarray,
    committed: Sequence[int],
    drafts: Sequence[int],
    q: Sequence[Distribution],
    sampler: SamplerParams,
    rng: np.random.Generator,
) -> Verdict:
    """The verdict on ``drafts`` (drawn from ``q``) after the ``committed`` tokens.

    ``rows[i]`` is the target's logits row after ``committed`` plus
    ``drafts[:i]`` (``len(drafts) + 1`` rows). The greedy rule draws nothing
    from ``rng``; the exact rule draws what :func:`accept_rejection` draws.
    """
    history = list(committed[-sampler.repeat_last_n :]) if sampler.repeat_last_n else []
    drafts = list(drafts)

    def p_at(i: int) -> Distribution:
        return distribution(rows[i], history + drafts[:i], sampler)

    p: list[Distribution]
    if sampler.greedy:
        choices: list[int] = []
        for i in range(len(drafts) + 1):
            choices.append(greedy_token(rows[i], history + drafts[:i], sampler))
            if i == len(drafts) or drafts[i] != choices[i]:
                break
        n_accepted, token = accept_greedy(drafts, choices)
        p = [p_at(i) for i in range(len(drafts) + 1)]  # only for the probabilities shown
    else:
        p = [p_at(i) for i in range(len(drafts) + 1)]
        n_accepted, token = accept_rejection(drafts, p, q, rng)
    return Verdict(
        n_accepted=n_accepted,
        token=token,
        target_probs=tuple(p[i].prob(t) for i, t in enumerate(drafts)),
        token_prob=p[n_accepted].prob(token),
        target_top=tuple(top(d) for d in p),
    )


def accept_greedy(drafts: Sequence[int], target_choice: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: keep drafts while they equal the target's argmax; return ``(n_accepted, next_token)``.

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
    """The exact rule of Leviathan et al. 2023 / Chen et al. 2023; return ``(n_accepted, next_token)``.

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
