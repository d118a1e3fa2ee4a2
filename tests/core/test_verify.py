"""The acceptance rules, proved on synthetic distributions.

The rejection-sampling test runs the whole draft -> verify loop over a toy
Markov "language model" and checks, with a chi-square test at a fixed seed,
that the generated sequences have exactly the target's distribution.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specchat.core.engine.sampling import Distribution
from specchat.core.engine.verify import accept_greedy, accept_rejection


def test_accept_greedy_prefix_and_correction() -> None:
    assert accept_greedy([5, 6, 7], [5, 6, 7, 8]) == (3, 8)  # full accept + bonus
    assert accept_greedy([5, 6, 7], [5, 9]) == (1, 9)  # correction replaces the first miss
    assert accept_greedy([5], [4]) == (0, 4)
    assert accept_greedy([], [3]) == (0, 3)  # depth 0: plain decoding


VOCAB = 4


def _toy_model(seed: int) -> np.ndarray:
    """A Markov table: row = previous token, distribution over the next."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.ones(VOCAB) * 0.7, size=VOCAB)
    return table


def _dist(row: np.ndarray) -> Distribution:
    keep = row > 0
    return Distribution(np.flatnonzero(keep).astype(np.int64), row[keep] / row[keep].sum())


def _speculate(p_table: np.ndarray, q_table: np.ndarray, length: int, depth: int,
               rng: np.random.Generator) -> tuple[int, ...]:
    out = [0]
    while len(out) - 1 < length:
        drafts, qs = [], []
        prev = out[-1]
        for _ in range(depth):
            q = _dist(q_table[prev])
            x = q.sample(rng)
            drafts.append(x)
            qs.append(q)
            prev = x
        ctx = [out[-1], *drafts]
        ps = [_dist(p_table[t]) for t in ctx]
        n, nxt = accept_rejection(drafts, ps, qs, rng)
        out.extend([*drafts[:n], nxt])
    return tuple(out[1 : length + 1])


@pytest.mark.parametrize("depth", [1, 3])
def test_rejection_sampling_reproduces_the_target_distribution(depth: int) -> None:
    p_table, q_table = _toy_model(1), _toy_model(2)
    q_table[:, 1] = 0.0  # the draft never proposes token 1: the residual must supply it
    q_table /= q_table.sum(axis=1, keepdims=True)
    length, n_samples = 3, 30_000
    rng = np.random.default_rng(1234 + depth)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n_samples):
        seq = _speculate(p_table, q_table, length, depth, rng)
        counts[seq] = counts.get(seq, 0) + 1
    chi2, cells = 0.0, 0
    for seq in itertools.product(range(VOCAB), repeat=length):
        prob, prev = 1.0, 0
        for t in seq:
            prob *= p_table[prev, t]
            prev = t
        expected = prob * n_samples
        if expected < 5:
            continue
        chi2 += (counts.get(seq, 0) - expected) ** 2 / expected
        cells += 1
    # 64 cells at most; the 99.9% point of chi-square with 63 dof is about 103.
    assert cells > 20
    assert chi2 < 103, chi2


def test_rejection_with_identical_distributions_accepts_everything() -> None:
    rng = np.random.default_rng(0)
    p = _dist(np.array([0.1, 0.2, 0.3, 0.4]))
    for _ in range(200):
        drafts = [p.sample(rng) for _ in range(4)]
        n, _ = accept_rejection(drafts, [p] * 5, [p] * 4, rng)
        assert n == 4


def test_one_hot_draft_is_accepted_with_probability_p() -> None:
    """The n-gram drafter's q is one-hot: acceptance must be p(x) and the result still exact."""
    rng = np.random.default_rng(5)
    p = _dist(np.array([0.6, 0.3, 0.1, 0.0]))
    q = Distribution.one_hot(1)
    results = [accept_rejection([1], [p, p], [q], rng) for _ in range(40_000)]
    accepted = np.mean([n == 1 for n, _ in results])
    assert abs(accepted - 0.3) < 0.01
    first = np.array([1 if n == 1 else t for n, t in results])
    for token, prob in enumerate([0.6, 0.3, 0.1, 0.0]):
        assert abs((first == token).mean() - prob) < 0.01
