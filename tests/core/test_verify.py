"""The acceptance rules and the verdict, proved on synthetic logits and distributions.

The rejection-sampling test runs the whole draft -> verify loop over a toy
Markov "language model" and checks, with a chi-square test at a fixed seed,
that the generated sequences have exactly the target's distribution.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specchat.core.engine.sampling import Distribution, distribution
from specchat.core.engine.verify import Verdict, accept_greedy, accept_rejection, judge, top
from specchat.core.types import SamplerParams


def test_accept_greedy_prefix_and_correction() -> None:
    assert accept_greedy([5, 6, 7], [5, 6, 7, 8]) == (3, 8)  # full accept + bonus
    assert accept_greedy([5, 6, 7], [5, 9]) == (1, 9)  # correction replaces the first miss
    assert accept_greedy([5], [4]) == (0, 4)
    assert accept_greedy([], [3]) == (0, 3)  # depth 0: plain decoding


# Logits rows over 5 tokens: the target prefers 2, then 3, then 4, then 0 after each position.
ROWS = np.array(
    [
        [0.0, -1.0, 4.0, 1.0, 0.5],
        [0.0, -1.0, 1.0, 4.0, 0.5],
        [0.0, -1.0, 1.0, 0.5, 4.0],
        [4.0, -1.0, 1.0, 0.5, 0.0],
    ],
    dtype=np.float32,
)
PLAIN = SamplerParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0)


def _untouched(rng: np.random.Generator) -> bool:
    return rng.bit_generator.state == np.random.default_rng(9).bit_generator.state


@pytest.mark.parametrize(
    ("drafts", "n_accepted", "token"),
    [
        ([2, 3, 4], 3, 0),  # all kept, and the bonus after them
        ([2, 3, 1], 2, 4),  # the correction replaces the first miss
        ([1, 3, 4], 0, 2),
        ([], 0, 2),  # depth 0: a plain round
    ],
)
def test_greedy_verdict_keeps_drafts_while_they_match_the_argmax(drafts, n_accepted, token) -> None:
    rng = np.random.default_rng(9)
    verdict = judge(ROWS[: len(drafts) + 1], [7, 8], drafts, [Distribution.one_hot(t) for t in drafts], PLAIN, rng)
    assert (verdict.n_accepted, verdict.token) == (n_accepted, token)
    shown = [distribution(ROWS[i], [], PLAIN) for i in range(len(drafts) + 1)]
    assert verdict.target_probs == tuple(shown[i].prob(t) for i, t in enumerate(drafts))
    assert verdict.token_prob == shown[n_accepted].prob(token) > 0.5
    assert _untouched(rng)  # the greedy rule draws nothing


def test_greedy_verdict_applies_the_repeat_penalty_to_the_committed_tail_and_the_drafts() -> None:
    """Token 2 just committed: a strong penalty moves the first argmax to 3; after draft 3, to 4."""
    penalty = SamplerParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=8.0, repeat_last_n=1)
    rows = np.array([[0.0, -1.0, 4.0, 1.0, 0.5], [0.0, -1.0, 1.0, 4.0, 3.0]], dtype=np.float32)
    verdict = judge(rows, [0, 2], [3], [Distribution.one_hot(3)], penalty, np.random.default_rng(9))
    assert (verdict.n_accepted, verdict.token) == (1, 4)
    # The window is repeat_last_n long: a token committed earlier than that is not penalised.
    verdict = judge(rows, [2, 0], [3], [Distribution.one_hot(3)], penalty, np.random.default_rng(9))
    assert (verdict.n_accepted, verdict.token) == (0, 2)


def test_sampled_verdict_is_the_exact_rule_on_the_targets_distributions() -> None:
    sampler = SamplerParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0)
    committed, drafts = [1, 4], [2, 3, 4]
    q = [Distribution.one_hot(t) for t in drafts]  # an n-gram draft: each kept with probability p(x)
    p = [distribution(ROWS[i], committed + drafts[:i], sampler) for i in range(4)]
    outcomes = set()
    for seed in range(200):
        verdict = judge(ROWS, committed, drafts, q, sampler, np.random.default_rng(seed))
        n, token = accept_rejection(drafts, p, q, np.random.default_rng(seed))
        assert verdict == Verdict(
            n, token, tuple(p[i].prob(t) for i, t in enumerate(drafts)), p[n].prob(token), tuple(top(d) for d in p)
        )
        outcomes.add(n)
    assert outcomes == {0, 1, 2, 3}  # every length of accepted prefix happened


VOCAB = 4


def _toy_model(seed: int) -> np.ndarray:
    """A Markov table: row = previous token, distribution over the next."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.ones(VOCAB) * 0.7, size=VOCAB)
    return table


def _dist(row: np.ndarray) -> Distribution:
    keep = row > 0
    return Distribution(np.flatnonzero(keep).astype(np.int64), row[keep] / row[keep].sum())


def _speculate(
    p_table: np.ndarray, q_table: np.ndarray, length: int, depth: int, rng: np.random.Generator
) -> tuple[int, ...]:
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
