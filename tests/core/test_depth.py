"""Fixed and adaptive speculation depth."""

from __future__ import annotations

import random

import pytest

from specchat.core.engine.depth import WARMUP_ROUNDS, AdaptiveDepth, DepthControl, expected_tokens
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
    with pytest.raises(SpecchatError, match="depth must be 0-16 or auto, got 17"):
        control.set(17)
    assert DepthControl().requested is None  # auto by default, as everywhere
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


def test_round_overhead_is_part_of_the_cost_and_favours_deeper_rounds() -> None:
    def trained(overhead: float | None) -> AdaptiveDepth:
        ctrl = AdaptiveDepth()
        for n in range(0, 9):  # verify 20 ms + 4 ms per extra token, 5 ms per draft step, 90% acceptance
            for _ in range(5):
                ctrl.observe(n, round(0.9 * n), 0.005 if n else None, 0.02 + 0.004 * n, overhead)
        return ctrl

    bare, costly = trained(None), trained(0.03)
    assert costly.overhead(True) == pytest.approx(0.03) and bare.overhead(True) == 0.0
    for k in (0, 3, 8):
        seconds = k * 0.005 + costly.verify_cost(k + 1)
        assert costly.predicted_rate(k) == pytest.approx(expected_tokens(costly.alpha, k) / (seconds + 0.03))
    assert costly.plain_rate_estimate() == pytest.approx(1 / (0.02 + 0.03))
    # A fixed cost per round makes more tokens per round worth more.
    assert costly.choose() > bare.choose()


def test_overhead_of_plain_and_drafted_rounds_is_kept_apart() -> None:
    ctrl = AdaptiveDepth()
    ctrl.observe(0, 0, None, 0.02, 0.001)
    assert ctrl.overhead(True) == ctrl.overhead(False) == pytest.approx(0.001)  # one kind stands in for the other
    ctrl.observe(4, 4, 0.005, 0.03, 0.004)
    assert ctrl.overhead(False) == pytest.approx(0.001) and ctrl.overhead(True) == pytest.approx(0.004)
    ctrl.observe(4, 4, 0.005, 0.03, -0.5)  # clock jitter can make the remainder negative: never below 0
    assert 0.0 <= ctrl.overhead(True) < 0.004


def test_verify_line_is_refitted_after_each_observation() -> None:
    ctrl = AdaptiveDepth()
    ctrl.observe(0, 0, None, 0.02)
    ctrl.observe(3, 3, 0.005, 0.032)
    assert ctrl.verify_cost(1) == pytest.approx(0.02)
    assert ctrl.verify_cost(7) == pytest.approx(0.044)
    ctrl.observe(3, 3, 0.005, 0.032 + 0.12 / 0.15)  # a slow batch of 4 pulls the line up
    assert ctrl.verify_cost(7) > 0.1


def test_warm_up_rounds_run_at_the_start_depth() -> None:
    ctrl = AdaptiveDepth(start=4)
    assert ctrl.choose() == 0  # measures plain decoding first
    ctrl.observe(0, 0, None, 0.02)
    chosen = []
    for _ in range(WARMUP_ROUNDS):
        chosen.append(ctrl.choose())
        ctrl.observe(chosen[-1], 0, 0.05, 0.06)  # dreadful rounds: nothing accepted, drafting dear
    assert chosen == [4] * WARMUP_ROUNDS
    assert ctrl.choose() == 0  # only then does the cost model decide


def test_the_drafts_catch_up_is_paid_once_per_round() -> None:
    ctrl = AdaptiveDepth()
    ctrl.observe(0, 0, None, 0.02)
    ctrl.observe(4, 4, 0.008, 0.035, sync_seconds=0.014)
    assert ctrl.draft_cost(0) == 0.0
    assert ctrl.draft_cost(1) == pytest.approx(0.014)
    assert ctrl.draft_cost(5) == pytest.approx(0.014 + 4 * 0.008)
    # With a dear catch-up, deeper rounds spread it over more tokens.
    cheap = AdaptiveDepth()
    cheap.observe(0, 0, None, 0.02)
    cheap.observe(4, 4, 0.008, 0.035, sync_seconds=0.008)

    def ratio(c: AdaptiveDepth) -> float:
        return c.predicted_rate(8) / c.predicted_rate(1)

    assert ratio(ctrl) > ratio(cheap)


def test_draft_cost_counts_sampling_per_token_and_borrows_what_is_unmeasured() -> None:
    full = AdaptiveDepth()
    full.observe(0, 0, None, 0.02)
    full.observe(4, 4, 0.002, 0.03, sync_seconds=0.0025, sample_seconds=0.001)
    assert full.draft_cost(1) == pytest.approx(0.0025 + 0.001)
    assert full.draft_cost(8) == pytest.approx(0.0025 + 8 * 0.001 + 7 * 0.002)
    # Only depth-1 rounds so far: no further step was measured, so a step costs what a catch-up does.
    shallow = AdaptiveDepth()
    shallow.observe(0, 0, None, 0.02)
    shallow.observe(1, 1, None, 0.025, sync_seconds=0.004)
    assert shallow.draft_cost(3) == pytest.approx(3 * 0.004)
    # The n-gram drafter has no catch-up and no model: k proposals at its measured cost each.
    ngram = AdaptiveDepth()
    ngram.observe(0, 0, None, 0.02)
    ngram.observe(4, 2, 0.0001, 0.03)
    assert ngram.draft_cost(5) == pytest.approx(5 * 0.0001)
