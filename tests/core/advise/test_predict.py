"""The advisor's prediction on synthetic measurements: exact arithmetic, no timing."""

from __future__ import annotations

import pytest

from specchat.core.advise.calibrate import Measurement, RoundSample, depth_schedule
from specchat.core.advise.predict import (
    acceptance_curve,
    draft_costs,
    losing_reason,
    predict,
    proposal_lengths,
    rate_at,
)
from specchat.core.engine.costs import RoundCosts
from specchat.core.engine.depth import expected_tokens_curve

VERIFY_BASE, VERIFY_PER_TOKEN = 0.010, 0.002  # the target: 12 ms for one token, 2 ms more per token


def verify(n: int) -> float:
    return VERIFY_BASE + VERIFY_PER_TOKEN * n


def plain_run(rounds: int = 10) -> Measurement:
    return Measurement([RoundSample(0, 0, 0, verify(1), overhead=0.001) for _ in range(rounds)], rounds, 1.0, 1)


def drafted_run(
    accepted: list[int], *, depth: int = 4, step: float = 0.001, sync: float = 0.002, sample: float = 0.0
) -> Measurement:
    rounds = [
        RoundSample(depth, depth, a, verify(depth + 1), overhead=0.001, step=step, sync=sync, sample=sample)
        for a in accepted
    ]
    return Measurement(rounds, sum(a + 1 for a in accepted), 1.0, 1)


def test_depth_schedule_alternates_the_deepest_with_each_shallower_depth() -> None:
    assert depth_schedule(4) == [4, 1, 4, 2, 4, 3]
    assert depth_schedule(1) == [1]
    assert depth_schedule(0) == [0]


def test_acceptance_per_position_is_conditional_on_the_earlier_ones() -> None:
    # Four rounds at depth 4 accepting 4, 2, 1, 0: position 1 reached 4 times, accepted 3;
    # position 2 reached 3 (those that accepted 1+), accepted 2; position 3 reached 2, accepted 1; 4: 1 of 1.
    rounds = drafted_run([4, 2, 1, 0]).rounds
    assert acceptance_curve(rounds, 4) == pytest.approx((3 / 4, 2 / 3, 1 / 2, 1.0))
    # Positions no round reached reuse the last measured value.
    assert acceptance_curve(rounds, 6)[4:] == pytest.approx((1.0, 1.0))


def test_a_drafter_that_proposes_fewer_tokens_counts_them_and_the_gaps_as_rejections() -> None:
    rounds = [RoundSample(4, 0, 0, verify(1), step=0.0001), RoundSample(4, 2, 2, verify(3), step=0.0001)]
    assert proposal_lengths(rounds, 4) == pytest.approx((0.5, 1.0, 1.0, 1.0))
    assert acceptance_curve(rounds, 3) == pytest.approx((0.5, 1.0, 0.0))


def test_the_verify_cost_is_a_line_through_the_means_per_batch_size() -> None:
    # Two rounds per size, one slow and one fast: the mean (what a reply pays) lies on the line.
    rounds = [RoundSample(k, k, 0, verify(k + 1) + d) for k in range(1, 4) for d in (0.004, -0.004)]
    rounds += [RoundSample(0, 0, 0, verify(1), overhead=0.003)] * 2
    costs = RoundCosts.fitted(rounds)
    for n in range(1, 6):
        assert costs.verify_cost(n) == pytest.approx(verify(n))
    assert costs.overhead(False) == pytest.approx(0.003)
    assert costs.plain_rate() == pytest.approx(1 / (verify(1) + 0.003))


def test_a_one_token_pass_keeps_its_own_measured_cost() -> None:
    # On a CPU one token takes a cheaper path than the batches' line says: 6 ms, not 12.
    rounds = [RoundSample(k, k, 0, verify(k + 1)) for k in (1, 2, 3)] + [RoundSample(0, 0, 0, 0.006)] * 3
    costs = RoundCosts.fitted(rounds)
    assert costs.verify_cost(1) == pytest.approx(0.006)
    assert costs.verify_cost(3) == pytest.approx(verify(3))
    assert costs.plain_rate() == pytest.approx(1 / 0.006)
    # One plain round and one batch size: a single line through both.
    few = RoundCosts.fitted([RoundSample(0, 0, 0, 0.010), RoundSample(4, 4, 0, 0.020)])
    assert few.verify_cost(1) == pytest.approx(0.010) and few.verify_cost(3) == pytest.approx(0.015)


def test_predicted_rates_follow_the_shared_cost_model() -> None:
    plain, run = plain_run(), drafted_run([4, 4, 3, 4, 2, 4], depth=4)
    prediction = predict(plain, run, 4)
    target = RoundCosts.fitted([*plain.rounds, *run.rounds])
    draft = draft_costs(run.rounds, 4)
    curve = draft.acceptance
    for k in range(1, 5):
        seconds = 0.002 + (k - 1) * 0.001 + verify(k + 1) + 0.001
        assert prediction.rates[k] == pytest.approx(expected_tokens_curve(curve, k) / seconds)
        assert rate_at(target, draft, k) == pytest.approx(prediction.rates[k])
    assert prediction.rates[0] == pytest.approx(1 / (verify(1) + 0.001))
    assert prediction.best_depth == max(range(5), key=lambda k: prediction.rates[k])
    assert prediction.speedup == pytest.approx(prediction.rates[prediction.best_depth] / prediction.rates[0])
    assert 0 <= prediction.auto_depth <= 4
    assert prediction.cost_ratio == pytest.approx(0.001 / verify(1))


def test_checking_a_batch_never_costs_less_than_a_plain_round_whatever_the_fitted_line_says() -> None:
    """Timings from a busy machine: batches measured cheaper than the one-token pass they include."""
    plain = Measurement([RoundSample(0, 0, 0, 0.020, overhead=0.001) for _ in range(10)], 10, 1.0, 1)
    never = Measurement(
        [
            RoundSample(d, d, 0, 0.008 + 0.001 * d, overhead=0.0005, step=0.0002, sync=0.0004)
            for d in (1, 2, 4, 1, 2, 4)
        ],
        6,
        1.0,
        1,
    )
    target = RoundCosts.fitted([*plain.rounds, *never.rounds])
    assert target.verify_cost(2) >= target.verify_cost(1)  # floored at the one-token pass, whatever the line says
    prediction = predict(plain, never, 4)
    assert prediction.best_depth == 0  # a draft that is never accepted cannot beat plain decoding
    assert all(rate < prediction.rates[0] for rate in prediction.rates[1:])


def test_a_draft_that_guesses_badly_is_told_so() -> None:
    prediction = predict(plain_run(), drafted_run([0] * 7 + [1], depth=4), 4)
    assert prediction.best_depth == 0
    assert prediction.speedup == pytest.approx(1.0)
    assert losing_reason(prediction, None) == f"accepts only {prediction.acceptance:.0%} of drafts"
    assert prediction.acceptance < 0.3


def test_a_draft_that_guesses_well_but_costs_too_much_is_told_so() -> None:
    # Every draft accepted, but each step costs 60% of a one-token target pass (12 ms).
    costly = predict(plain_run(), drafted_run([4] * 6, depth=4, step=0.0072, sync=0.0072), 4)
    assert costly.cost_ratio == pytest.approx(0.6)
    cheap = predict(plain_run(), drafted_run([4] * 6, depth=4), 4)
    assert cheap.speedup > costly.speedup
    assert losing_reason(costly, cheap) == (
        f"guesses well but costs 60% of a target pass ({costly.speedup:.2f}x against {cheap.speedup:.2f}x)"
    )
    assert losing_reason(cheap, cheap) == ""
    # Dearer still, it no longer beats plain decoding: the cost alone is the reason.
    hopeless = predict(plain_run(), drafted_run([4] * 6, depth=4, step=0.03, sync=0.03), 4)
    assert hopeless.speedup == pytest.approx(1.0)
    assert losing_reason(hopeless, cheap) == f"guesses well but costs {hopeless.cost_ratio:.0%} of a target pass"


def test_a_runner_up_that_guesses_less_well_is_told_by_how_much() -> None:
    best = predict(plain_run(), drafted_run([4] * 6, depth=4), 4)
    worse = predict(plain_run(), drafted_run([4, 1, 4, 2, 4, 0], depth=4), 4)
    assert 1.0 < worse.speedup < best.speedup
    assert losing_reason(worse, best) == (
        f"accepts {worse.acceptance:.0%} of drafts, the best 100% ({worse.speedup:.2f}x against {best.speedup:.2f}x)"
    )
