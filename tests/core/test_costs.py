"""The round-cost model: the verify cost's floor and monotonicity, learning round by round, the fit to a calibration."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from specchat.core.advise.calibrate import PROMPTS, RoundSample, measure
from specchat.core.cancel import CancelToken
from specchat.core.engine.costs import (
    MAX_VERIFY_SLOPE,
    PLAIN_TRUSTED,
    RoundCosts,
    unmeasured_verify_costs,
)
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind

MODELS = Path(__file__).resolve().parents[1] / "models"


def learned(rounds: list[tuple[int, float]], overhead: float | None = None) -> RoundCosts:
    """Costs that observed ``(n_drafted, verify seconds)`` rounds in order."""
    costs = RoundCosts()
    for n_drafted, seconds in rounds:
        costs.observe(n_drafted, seconds, overhead)
    return costs


def test_nothing_measured_prices_a_pass_at_one_and_a_cpu_like_shape() -> None:
    costs = RoundCosts()
    assert not costs.measured_plain()
    assert costs.verify_cost(1) == 1.0 and costs.plain_rate() == 0.0
    shape = unmeasured_verify_costs(6)
    assert shape[1] == 1.0 and all(b > a for a, b in zip(shape[1:], shape[2:], strict=False))


def test_a_batch_never_costs_less_than_the_one_token_pass_plus_the_slope() -> None:
    """Deep batches timed cheap (a line that reaches 2 tokens below the one-token pass) and a measured pass."""
    costs = learned([(0, 0.027)] * PLAIN_TRUSTED + [(n - 1, s) for n, s in [(9, 0.030), (13, 0.034), (17, 0.038)]])
    assert costs.measured_plain()
    assert costs.verify_cost(1) == pytest.approx(0.027)  # taken as measured
    slope = 0.001  # the batches' line: 0.021 + 0.001 n
    assert costs.verify_cost(2) == pytest.approx(0.027 + slope)  # floored, where the line says 0.023
    assert costs.verify_cost(3) == pytest.approx(0.027 + 2 * slope)
    assert costs.verify_cost(17) > costs.verify_cost(3)
    # Too few one-token passes: the pass is read from the line, and nothing floors the batches at it.
    early = learned([(0, 0.027), (8, 0.030), (12, 0.034), (16, 0.038)])
    assert early.verify_cost(1) < 0.027


def test_the_verify_costs_a_drafter_reads_are_monotone_and_capped() -> None:
    # Size 6 measured often and cheap, the sizes about it on a line: its own bump dips below size 5's cost.
    costs = learned(
        [(0, 0.020)] * PLAIN_TRUSTED + [(k, 0.026 if k == 5 else 0.020 + 0.004 * (k + 1)) for k in range(1, 9)] * 30
    )
    assert costs.verify_cost(6) < costs.verify_cost(5)
    verify = costs.verify_costs(10)
    assert len(verify) == 10
    assert verify[1] == costs.verify_cost(1)
    assert all(b >= a for a, b in zip(verify[1:], verify[2:], strict=False))
    assert verify[6] == verify[5] == costs.verify_cost(5)
    # One batch timed at a load spike leaves the line steep: each extra token is capped.
    spiked = learned([(0, 0.025)] * 5 + [(16, 0.9)])
    assert spiked.verify_cost(9) > 0.4
    capped = spiked.verify_costs(18)
    for n in range(2, 18):
        assert capped[n] <= capped[1] * (1 + MAX_VERIFY_SLOPE * (n - 1)) + 1e-12


def test_costs_follow_the_machine_s_load_round_by_round() -> None:
    """Batches measured quiet, then plain rounds three times slower: the batches' costs follow them."""
    costs = learned([(0, 0.02)] * 3 + [(k, 0.02 + 0.004 * k) for k in range(1, 9)] * 4, overhead=0.001)
    batch_before, overhead_before = costs.verify_cost(5), costs.overhead(True)
    assert costs.load == pytest.approx(1.0, rel=0.05)
    for _ in range(12):
        costs.observe(0, 0.06, 0.003)
    assert costs.load > 2.5
    assert costs.verify_cost(1) == pytest.approx(0.06, rel=0.01)
    assert costs.verify_cost(5) > 2.5 * batch_before  # never timed again, yet as dear as the load says
    assert costs.overhead(True) == pytest.approx(costs.load * overhead_before)


def test_draft_timings_are_learned_and_priced_per_round() -> None:
    costs = RoundCosts()
    costs.observe(0, 0.02, 0.001)
    costs.observe(4, 0.03, 0.002, step_seconds=0.004, sync_seconds=0.006, sample_seconds=0.0005)
    assert costs.draft_cost(0) == 0.0
    assert costs.draft_cost(4) == pytest.approx(0.006 + 4 * 0.0005 + 3 * 0.004)
    assert costs.round_cost(4) == pytest.approx(costs.draft_cost(4) + costs.verify_cost(5) + 0.002)
    assert costs.round_cost(0) == pytest.approx(1 / costs.plain_rate())


def test_fitted_to_rounds_the_means_per_batch_size_make_the_costs() -> None:
    """Synthetic calibration rounds: a fast and a slow round per size average onto a line."""
    rounds = [
        RoundSample(k, k, 0, 0.010 + 0.002 * (k + 1) + d, overhead=0.002, step=0.003, sync=0.005, sample=0.001)
        for k in range(1, 5)
        for d in (0.004, -0.004)
    ]
    rounds += [RoundSample(0, 0, 0, 0.012, overhead=0.001)] * 4
    costs = RoundCosts.fitted(rounds)
    assert costs.load == 1.0 and costs.measured_plain()
    for n in range(1, 6):
        assert costs.verify_cost(n) == pytest.approx(0.010 + 0.002 * n)
    assert costs.overhead(False) == pytest.approx(0.001) and costs.overhead(True) == pytest.approx(0.002)
    assert costs.draft_cost(3) == pytest.approx(0.005 + 3 * 0.001 + 2 * 0.003)
    assert costs.plain_rate() == pytest.approx(1 / 0.013)
    with pytest.raises(ValueError):
        RoundCosts.fitted([])


def test_fitted_to_a_real_calibration() -> None:
    """Plain decoding and a draft model calibrated on the small test pair, fitted together as the advisor does:
    the one-token pass is what the plain rounds measured, and the costs a drafter reads rise with the batch."""
    runtime = Runtime.load(MODELS / "llama.gguf", MODELS / "llama-q8.gguf", n_ctx=512)
    try:
        prompt = runtime.prompt([{"role": "user", "content": PROMPTS[0][1]}]).tokens
        runs = [
            measure(
                runtime.target_side,
                runtime.drafter_for(kind),
                [prompt],
                max_depth=depth,
                max_tokens=24,
                deadline=time.perf_counter() + 3600,
                cancel=CancelToken(),
            )
            for kind, depth in ((DrafterKind.NONE, 0), (DrafterKind.DRAFT_MODEL, 4))
        ]
    finally:
        runtime.close()
    rounds = [r for run in runs for r in run.rounds]
    costs = RoundCosts.fitted(rounds)
    plain = [r.verify for r in runs[0].rounds]
    assert len(plain) >= PLAIN_TRUSTED and {r.drafted for r in runs[1].rounds} >= {1, 4}
    assert costs.verify_cost(1) == pytest.approx(statistics.fmean(plain))
    assert costs.overhead(False) == pytest.approx(
        statistics.fmean(r.overhead for r in runs[0].rounds if r.overhead is not None)
    )
    verify = costs.verify_costs(6)
    assert verify[1] == costs.verify_cost(1)
    assert all(b >= a for a, b in zip(verify[1:], verify[2:], strict=False))
