"""Fixed and adaptive speculation depth."""

from __future__ import annotations

import random

import pytest

from specchat.core.engine.depth import AdaptiveDepth, DepthControl, expected_tokens
from specchat.core.types import SpecchatError, parse_depth


def test_expected_tokens_formula() -> None:
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def _run(ctrl: AdaptiveDepth, alpha: float, step: float, verify1: float, per_token: float, rounds: int) -> list[int]:
    rng = random.Random(7)
    chosen = []
    for _ in range(rounds):
        k = ctrl.choose()
        chosen.append(k)
        n_acc = 0
        while n_acc < k and rng.random() < alpha:  # each draft accepted with probability alpha
            n_acc += 1
        ctrl.observe(k, n_acc, step if k else None, verify1 + per_token * k)
    return chosen


def test_adaptive_goes_deep_when_drafts_are_cheap_and_right() -> None:
    chosen = _run(AdaptiveDepth(), alpha=1.0, step=0.002, verify1=0.03, per_token=0.001, rounds=40)
    assert chosen[0] == 0  # first round measures plain decoding
    assert min(chosen[-10:]) >= 8


def test_adaptive_backs_off_to_plain_decoding_when_drafts_are_wrong() -> None:
    chosen = _run(AdaptiveDepth(probe_every=12), alpha=0.0, step=0.01, verify1=0.02, per_token=0.008, rounds=60)
    tail = chosen[-36:]
    assert tail.count(0) >= 30  # mostly plain decoding, with an occasional probe
    assert max(tail) <= 2


def test_adaptive_prefers_short_drafts_on_a_cpu_like_cost_curve() -> None:
    # Verify cost grows with batch size: the best depth is about 2 (rates 63, 64, 62, 58 tok/s at k=1..4).
    chosen = _run(AdaptiveDepth(), alpha=0.7, step=0.004, verify1=0.02, per_token=0.003, rounds=80)
    assert 1 <= sorted(chosen[-30:])[15] <= 4


def test_depth_control_and_parsing() -> None:
    control = DepthControl(3)
    control.set(None)
    assert control.requested is None
    with pytest.raises(ValueError):
        control.set(17)
    assert parse_depth("auto") is None and parse_depth("16") == 16 and parse_depth(0) == 0
    for bad in ("99", "-1", "deep"):
        with pytest.raises(SpecchatError):
            parse_depth(bad)


def test_plain_rate_estimate_comes_from_the_single_token_verify_cost() -> None:
    ctrl = AdaptiveDepth()
    assert ctrl.plain_rate_estimate() == 0.0
    ctrl.observe(0, 0, None, 0.02)
    assert ctrl.plain_rate_estimate() == pytest.approx(50.0)
    fixed = AdaptiveDepth()
    for n in (3, 5):  # only batches of 4 and 6 measured: extrapolate the line down to 1
        fixed.observe(n, n, 0.005, 0.02 + 0.004 * n)
    assert fixed.plain_rate_estimate() == pytest.approx(50.0)  # 0.02 s at one token
