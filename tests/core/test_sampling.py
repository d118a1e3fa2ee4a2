"""The numpy sampler against a plain dense reference, and the residual rule."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from specchat.core.engine.sampling import (
    Distribution,
    _top_k_candidates,
    apply_repetition_penalty,
    distribution,
    greedy_token,
    residual,
)
from specchat.core.types import SamplerParams, SpecchatError


def reference(row: np.ndarray, params: SamplerParams) -> np.ndarray:
    """Dense, obviously-correct version: penalties already applied by the caller."""
    temp = params.temperature or 1.0
    x = row.astype(np.float64) / temp
    keep = np.ones(len(row), dtype=bool)
    if params.min_p > 0:
        keep &= x >= x.max() + math.log(params.min_p)
    if params.top_k:
        order = np.argsort(-np.where(keep, x, -np.inf), kind="stable")
        topk = np.zeros_like(keep)
        topk[order[: params.top_k]] = True
        keep &= topk
    p = np.where(keep, np.exp(x - x.max()), 0.0)
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        n_keep = int(np.searchsorted(cum, params.top_p, side="left")) + 1
        mask = np.zeros_like(keep)
        mask[order[:n_keep]] = True
        p = np.where(mask, p, 0.0)
        p /= p.sum()
    return p


params_strategy = st.builds(
    SamplerParams,
    temperature=st.sampled_from([0.0, 0.3, 0.8, 1.0, 1.7]),
    top_k=st.sampled_from([0, 1, 5, 40]),
    top_p=st.sampled_from([1.0, 0.9, 0.5]),
    min_p=st.sampled_from([0.0, 0.05, 0.2]),
)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([7, 300, 5000]), params=params_strategy)
@example(seed=756138, n=5000, params=SamplerParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.2))
def test_distribution_matches_dense_reference(seed: int, n: int, params: SamplerParams) -> None:
    rng = np.random.default_rng(seed)
    # Flat-ish or peaked rows; distinct values avoid ties, where "the" top-k is not unique.
    scale = 3.0 if seed % 2 else 0.3
    row = (rng.normal(0, scale, n) + rng.permutation(n) * 1e-3).astype(np.float32)
    if params.min_p > 0:  # a logit on min-p's threshold is in or out by the last bit of rounding: a tie too
        x = row.astype(np.float64) / (params.temperature or 1.0)
        assume(np.min(np.abs(x - x.max() - math.log(params.min_p))) > 1e-5)
    d = distribution(row, [], params)
    expected = reference(row, params)
    assert np.all(np.diff(d.ids) > 0)
    assert d.probs.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(d.dense(n), expected, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 60))
def test_top_k_prefilter_keeps_exactly_the_top_k(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    row = rng.standard_normal(152_000).astype(np.float32)
    got = np.sort(_top_k_candidates(row, k))
    want = np.sort(np.argsort(-row)[:k])
    np.testing.assert_array_equal(got, want)


def test_repetition_penalty_follows_llama_cpp_rule() -> None:
    row = np.array([2.0, -2.0, 1.0, 0.5], dtype=np.float32)
    params = SamplerParams(repeat_penalty=2.0, repeat_last_n=3)
    out = apply_repetition_penalty(row, [9 % 4, 0, 1, 1], params)
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0, 0.5])
    assert row[0] == 2.0  # the logits view itself is never modified
    assert greedy_token(np.array([3.0, 2.0], dtype=np.float32), [0], SamplerParams(repeat_penalty=2.0)) == 1


def test_residual_makes_the_rule_exact() -> None:
    """P(out=x) = q(x) min(1, p/q) + P(reject) * residual(x) must equal p(x) exactly."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 12))
        ids = np.arange(n)
        p_raw, q_raw = rng.dirichlet(np.ones(n) * 0.5), rng.dirichlet(np.ones(n) * 0.5)
        p_raw[rng.random(n) < 0.2] = 0.0
        q_raw[rng.random(n) < 0.2] = 0.0
        if p_raw.sum() == 0 or q_raw.sum() == 0:
            continue
        p = Distribution(ids, p_raw / p_raw.sum())
        q = Distribution(ids, q_raw / q_raw.sum())
        accept = np.minimum(q.probs, p.probs)
        reject_mass = 1.0 - accept.sum()
        out = accept + reject_mass * residual(p, q).dense(n)
        np.testing.assert_allclose(out, p.probs, atol=1e-12)


def test_distribution_lookup_and_sampling() -> None:
    d = Distribution(np.array([3, 7, 9]), np.array([0.2, 0.5, 0.3]))
    assert d.prob(7) == 0.5 and d.prob(8) == 0.0 and d.prob(100) == 0.0
    np.testing.assert_allclose(d.probs_at(np.array([9, 1, 3])), [0.3, 0.0, 0.2])
    assert d.argmax() == 7
    rng = np.random.default_rng(0)
    draws = np.array([d.sample(rng) for _ in range(20000)])
    for token, prob in zip(d.ids, d.probs, strict=True):
        assert abs((draws == token).mean() - prob) < 0.015


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=-0.1),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(min_p=1.0),
        dict(top_k=-1),
        dict(repeat_penalty=0.0),
    ],
)
def test_odd_sampler_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(SpecchatError):
        SamplerParams(**kwargs)
