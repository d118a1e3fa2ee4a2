"""Fixed and adaptive speculation depth."""

from __future__ import annotations

import math
import random

import pytest

from specchat.core.engine.depth import (
    WARMUP_ROUNDS,
    AdaptiveDepth,
    DepthControl,
    expected_tokens,
    expected_tokens_curve,
)
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
    assert ctrl.costs.plain_rate() == 0.0
    ctrl.observe(0, 0, None, 0.02)
    assert ctrl.costs.plain_rate() == pytest.approx(50.0)
    fixed = AdaptiveDepth()
    for n in (3, 5):  # only batches of 4 and 6 measured: extrapolate the line down to 1
        fixed.observe(n, n, 0.005, 0.02 + 0.004 * n)
    assert fixed.costs.plain_rate() == pytest.approx(50.0)  # 0.02 s at one token


def test_round_overhead_is_part_of_the_cost_and_favours_deeper_rounds() -> None:
    def trained(overhead: float | None) -> AdaptiveDepth:
        ctrl = AdaptiveDepth()
        for n in range(0, 9):  # verify 20 ms + 4 ms per extra token, 5 ms per draft step, 90% acceptance
            for _ in range(5):
                ctrl.observe(n, round(0.9 * n), 0.005 if n else None, 0.02 + 0.004 * n, overhead)
        return ctrl

    bare, costly = trained(None), trained(0.03)
    assert costly.costs.overhead(True) == pytest.approx(0.03) and bare.costs.overhead(True) == 0.0
    for k in (0, 3, 8):
        seconds = k * 0.005 + costly.costs.verify_cost(k + 1)
        tokens = expected_tokens_curve(costly.acceptance_curve(), k)
        assert costly.predicted_rate(k) == pytest.approx(tokens / (seconds + 0.03))
    assert costly.costs.plain_rate() == pytest.approx(1 / (0.02 + 0.03))
    # A fixed cost per round makes more tokens per round worth more.
    assert costly.choose() > bare.choose()


def test_overhead_of_plain_and_drafted_rounds_is_kept_apart() -> None:
    ctrl = AdaptiveDepth()
    ctrl.observe(0, 0, None, 0.02, 0.001)
    # one kind stands in for the other
    assert ctrl.costs.overhead(True) == ctrl.costs.overhead(False) == pytest.approx(0.001)
    ctrl.observe(4, 4, 0.005, 0.03, 0.004)
    assert ctrl.costs.overhead(False) == pytest.approx(0.001) and ctrl.costs.overhead(True) == pytest.approx(0.004)
    ctrl.observe(4, 4, 0.005, 0.03, -0.5)  # clock jitter can make the remainder negative: never below 0
    assert 0.0 <= ctrl.costs.overhead(True) < 0.004


def test_verify_line_is_refitted_after_each_observation() -> None:
    ctrl = AdaptiveDepth()
    ctrl.observe(0, 0, None, 0.02)
    ctrl.observe(3, 3, 0.005, 0.032)
    assert ctrl.costs.verify_cost(1) == pytest.approx(0.02)
    assert ctrl.costs.verify_cost(7) == pytest.approx(0.044)
    ctrl.observe(3, 3, 0.005, 0.032 + 0.12 / 0.15)  # a slow batch of 4 pulls the line up
    assert ctrl.costs.verify_cost(7) > 0.1


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
    assert ctrl.costs.draft_cost(0) == 0.0
    assert ctrl.costs.draft_cost(1) == pytest.approx(0.014)
    assert ctrl.costs.draft_cost(5) == pytest.approx(0.014 + 4 * 0.008)
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
    assert full.costs.draft_cost(1) == pytest.approx(0.0025 + 0.001)
    assert full.costs.draft_cost(8) == pytest.approx(0.0025 + 8 * 0.001 + 7 * 0.002)
    # Only depth-1 rounds so far: no further step was measured, so a step costs what a catch-up does.
    shallow = AdaptiveDepth()
    shallow.observe(0, 0, None, 0.02)
    shallow.observe(1, 1, None, 0.025, sync_seconds=0.004)
    assert shallow.costs.draft_cost(3) == pytest.approx(3 * 0.004)
    # The n-gram drafter has no catch-up and no model: k proposals at its measured cost each.
    ngram = AdaptiveDepth()
    ngram.observe(0, 0, None, 0.02)
    ngram.observe(4, 2, 0.0001, 0.03)
    assert ngram.costs.draft_cost(5) == pytest.approx(5 * 0.0001)


# --- Acceptance per draft position -------------------------------------------------------------

FALLING = [0.95, 0.95, 0.9, 0.5, 0.3, 0.2]  # conditional acceptance of positions 1-6 (and beyond: 0.2)
GPU_LIKE = (0.02, 0.0005, 0.001)  # verify seconds for one token, per extra token; seconds per draft step
CPU_LIKE = (0.02, 0.0015, 0.002)


def _outcome(rng: random.Random, curve: list[float], k: int) -> int:
    """Accepted drafts of a depth-k round: position i holds with probability curve[i - 1] once i - 1 held."""
    n = 0
    while n < k and rng.random() < curve[min(n, len(curve) - 1)]:
        n += 1
    return n


def _feed(ctrl: AdaptiveDepth, k: int, n: int, costs: tuple[float, float, float]) -> None:
    verify1, per_token, step = costs
    ctrl.observe(k, n, step if k else None, verify1 + per_token * k)


def _true_rate(curve: list[float], k: int, costs: tuple[float, float, float]) -> float:
    verify1, per_token, step = costs
    return expected_tokens_curve(curve, k) / (verify1 + per_token * k + step * k)


def _trained_pair(
    curve: list[float], costs: tuple[float, float, float], seed: int, depth: int = 8, rounds: int = 60
) -> tuple[AdaptiveDepth, AdaptiveDepth]:
    """A positional and an i.i.d. controller that saw the same history of depth-``depth`` rounds."""
    positional, iid = AdaptiveDepth(), AdaptiveDepth(positional=False)
    rng = random.Random(seed)
    for ctrl in (positional, iid):
        _feed(ctrl, 0, 0, costs)
    for _ in range(rounds):
        n = _outcome(rng, curve, depth)
        for ctrl in (positional, iid):
            _feed(ctrl, depth, n, costs)
    return positional, iid


def test_each_round_counts_the_positions_it_reached_and_accepted() -> None:
    # Every round drafts 4 and keeps 2: positions 1-2 always accepted, 3 always rejected, 4 never reached.
    ctrl = AdaptiveDepth(prior_rejections=1e-6)
    for _ in range(200):
        ctrl.observe(4, 2, 0.002, 0.03)
    curve = ctrl.acceptance_curve()
    assert len(curve) == ctrl.max_depth
    assert curve[0] == pytest.approx(1.0, abs=0.01) and curve[1] == pytest.approx(1.0, abs=0.01)
    assert curve[2] == pytest.approx(0.0, abs=0.01)
    assert curve[3] == pytest.approx(0.0, abs=0.01)  # unreached: reads as the position before it
    assert ctrl.alpha == pytest.approx(2 / 3, abs=0.01)  # the pooled rate mixes them: 2 accepted per rejection
    iid = AdaptiveDepth(positional=False)
    iid.observe(4, 2, 0.002, 0.03)
    assert iid.acceptance_curve() == [iid.alpha] * iid.max_depth


@pytest.mark.parametrize("seed", range(5))
def test_falling_acceptance_makes_the_controller_draft_shallower_than_the_iid_model(seed: int) -> None:
    positional, iid = _trained_pair(FALLING, GPU_LIKE, seed)
    curve = positional.acceptance_curve()
    assert min(curve[:3]) > 0.85 and curve[4] < 0.65 and curve[5] < 0.55  # it sees the fall (true: 0.3, 0.2)
    k_pos, k_iid = positional.choose(), iid.choose()
    truly_best = max(range(17), key=lambda k: _true_rate(FALLING, k, GPU_LIKE))
    assert truly_best == 4
    assert k_pos < k_iid  # the i.i.d. model extrapolates the early positions' rate and drafts too deep
    assert abs(k_pos - truly_best) <= 1
    assert _true_rate(FALLING, k_pos, GPU_LIKE) > _true_rate(FALLING, k_iid, GPU_LIKE)


def _realized(
    ctrl: AdaptiveDepth, curve: list[float], costs: tuple[float, float, float], seed: int, rounds: int = 200
) -> float:
    """Mean true tokens per second of the depths ``ctrl`` chooses, driving, after 20 rounds of learning.

    Round r draws its outcome from its own seeded generator, so two controllers
    compared on the same seed face the same luck round by round.
    """
    rates = []
    for r in range(rounds):
        k = ctrl.choose()
        _feed(ctrl, k, _outcome(random.Random(seed * 100_003 + r), curve, k), costs)
        if r >= 20:
            rates.append(_true_rate(curve, k, costs))
    return sum(rates) / len(rates)


def test_falling_acceptance_gives_more_tokens_per_second_when_the_controller_drives() -> None:
    best = max(_true_rate(FALLING, k, GPU_LIKE) for k in range(17))
    for seed in range(3):
        positional = _realized(AdaptiveDepth(), FALLING, GPU_LIKE, seed)
        iid = _realized(AdaptiveDepth(positional=False), FALLING, GPU_LIKE, seed)
        assert positional > 1.03 * iid
        assert positional > 0.97 * best


@pytest.mark.parametrize("alpha", [0.5, 0.7, 0.85])
def test_constant_acceptance_reads_flat_and_chooses_as_the_iid_model_did(alpha: float) -> None:
    same = 0
    for seed in range(3):
        positional, iid = AdaptiveDepth(change_threshold=math.inf), AdaptiveDepth(positional=False)
        rng = random.Random(seed)
        for ctrl in (positional, iid):
            _feed(ctrl, 0, 0, CPU_LIKE)
        for _ in range(200):
            n = _outcome(rng, [alpha], 6)
            for ctrl in (positional, iid):
                _feed(ctrl, 6, n, CPU_LIKE)
        assert positional.alpha == iid.alpha  # the same level: only the shape could differ
        curve = positional.acceptance_curve()
        assert max(abs(a - iid.alpha) for a in curve[:3]) < 0.1  # and it is flat where it is well measured
        k_pos, k_iid = positional.choose(), iid.choose()
        assert abs(k_pos - k_iid) <= 1
        same += k_pos == k_iid
    assert same >= 2


@pytest.mark.parametrize("alpha", [0.5, 0.7, 0.85, 0.97])
def test_constant_acceptance_costs_nothing_when_the_controller_drives(alpha: float) -> None:
    for costs in (CPU_LIKE, GPU_LIKE):
        seeds = range(3)
        positional = sum(_realized(AdaptiveDepth(), [alpha], costs, seed) for seed in seeds)
        iid = sum(_realized(AdaptiveDepth(positional=False), [alpha], costs, seed) for seed in seeds)
        assert positional > 0.98 * iid


def test_the_prior_keeps_sparse_deep_positions_sane() -> None:
    ctrl = AdaptiveDepth()
    _feed(ctrl, 0, 0, CPU_LIKE)
    rng = random.Random(1)
    for _ in range(40):
        _feed(ctrl, 3, _outcome(rng, [0.7], 3), CPU_LIKE)
    _feed(ctrl, 9, 9, CPU_LIKE)  # position 9 seen once, accepted once: 100% by its own count
    curve = ctrl.acceptance_curve()
    assert curve[8] < 0.9
    assert curve[8] < max(curve[:3]) + 0.1  # one lucky round moves it a few points, not to 100%
    assert all(0.0 <= a <= 1.0 for a in curve)
    never = AdaptiveDepth()
    _feed(never, 0, 0, CPU_LIKE)
    for _ in range(40):
        _feed(never, 2, _outcome(rng, [0.7], 2), CPU_LIKE)
    unseen = never.acceptance_curve()
    assert unseen[15] <= unseen[1] + 1e-9  # positions never reached read as the deepest one seen


def _switch(ctrl: AdaptiveDepth, before: float, after: float, seed: int) -> list[int]:
    """Depths chosen over 60 rounds at acceptance ``before`` then 60 at ``after`` (CPU-like costs)."""
    rng = random.Random(seed)
    chosen = []
    for i in range(120):
        k = ctrl.choose()
        chosen.append(k)
        _feed(ctrl, k, _outcome(rng, [before if i < 60 else after], k), CPU_LIKE)
    return chosen


@pytest.mark.parametrize("seed", range(4))
def test_a_fall_in_acceptance_is_followed_within_a_few_rounds(seed: int) -> None:
    chosen = _switch(AdaptiveDepth(), 0.97, 0.3, seed)
    assert min(chosen[50:60]) >= 8  # deep while the draft guesses well
    assert max(chosen[65:]) <= 3  # shallow from the sixth round after the change on
    assert max(chosen[70:]) <= 2
    old = _switch(AdaptiveDepth(positional=False), 0.97, 0.3, seed)
    assert min(old[65:68]) > 3  # the model without the change test still drafts deep there


@pytest.mark.parametrize("seed", range(4))
def test_a_rise_in_acceptance_is_followed_after_the_next_probe(seed: int) -> None:
    ctrl = AdaptiveDepth(probe_every=12)
    chosen = _switch(ctrl, 0.2, 0.97, seed)
    assert max(chosen[40:60]) <= 2  # plain decoding with an occasional probe
    # A probe comes within 12 rounds; from there a few rounds of good guesses take it deep.
    assert min(chosen[60 + 12 + 10 :]) >= 6


# --- Verify costs and probing ----------------------------------------------------------------


def test_plain_decodings_cost_is_its_own_once_measured_a_few_times() -> None:
    # A one-token pass takes another kernel path: here 75 ms, while batches of 2-9 lie on 104 ms + 13 ms/token,
    # a line that puts one token at 91 ms and would understate plain decoding's rate by a fifth.
    ctrl = AdaptiveDepth()
    for n in range(2, 10):
        ctrl.observe(n - 1, n - 1, 0.03, 0.104 + 0.013 * (n - 2))
    ctrl.observe(0, 0, None, 0.075)
    assert ctrl.costs.verify_cost(1) == pytest.approx(0.091, abs=0.01)  # one plain round: the line still rules
    ctrl.observe(0, 0, None, 0.075)
    ctrl.observe(0, 0, None, 0.075)
    assert ctrl.costs.verify_cost(1) == pytest.approx(0.075)
    assert ctrl.costs.plain_rate() == pytest.approx(1 / 0.075, rel=0.01)
    assert ctrl.costs.verify_cost(5) == pytest.approx(0.104 + 0.013 * 3, rel=0.02)  # the batches' line, not bent by it


def test_a_batch_never_costs_less_than_a_one_token_pass() -> None:
    # Deep batches timed while the host was busy: the line through them falls below a one-token pass at two tokens.
    ctrl = AdaptiveDepth()
    for _ in range(3):
        ctrl.observe(0, 0, None, 0.027)
    for n, seconds in [(9, 0.040), (13, 0.048), (17, 0.070), (16, 0.066)]:
        ctrl.observe(n - 1, n - 1, 0.009, seconds)
    slope, intercept = ctrl.costs._fit_line()
    assert intercept + 2 * slope < 0.027  # what the line alone says
    # The floor is the one-token pass and, for each extra token, the line's slope: never free to verify.
    assert ctrl.costs.verify_cost(2) == pytest.approx(0.027 + slope)
    assert ctrl.costs.verify_cost(3) == pytest.approx(0.027 + 2 * slope)
    assert ctrl.costs.verify_cost(17) > 0.06  # deep batches keep their line


def test_a_batch_size_measured_often_keeps_its_own_cost() -> None:
    ctrl = AdaptiveDepth()
    for _ in range(8):
        for n in range(1, 13):
            ctrl.observe(n - 1, n - 1, 0.005, 0.02 + 0.004 * n)
    line_at_10 = ctrl.costs.verify_cost(10)
    assert line_at_10 == pytest.approx(0.02 + 0.004 * 10)
    # Batches of 10 turn out to cost twice the line (a slower kernel at that size) while the other sizes keep
    # theirs. (Had only batches of 10 been timed, twice as slow, that would read as the machine slowing down.)
    for i in range(80):
        ctrl.observe(9, 9, 0.005, 2 * (0.02 + 0.004 * 10))
        n = (2, 5, 11, 12)[i % 4]
        ctrl.observe(n - 1, n - 1, 0.005, 0.02 + 0.004 * n)
    assert ctrl.costs.verify_cost(10) > line_at_10 + 0.8 * (2 * (0.02 + 0.004 * 10) - line_at_10)
    assert ctrl.costs.verify_cost(11) < 1.3 * (0.02 + 0.004 * 11)  # its neighbours stay near the line


def test_plain_decoding_probes_sooner_when_the_draft_usually_pays() -> None:
    def rounds_to_probe(ctrl: AdaptiveDepth) -> int:
        for _ in range(100):  # a long good run: nearly every draft accepted
            k = ctrl.choose()
            ctrl.observe(k, k if k else 0, 0.002 if k else None, 0.02 + 0.0015 * k)
        for _ in range(30):  # then a bad patch: everything rejected, until the controller stops drafting
            k = ctrl.choose()
            if k == 0:
                ctrl.observe(0, 0, None, 0.02)
                break
            ctrl.observe(k, 0, 0.002, 0.02 + 0.0015 * k)
        assert k == 0
        for waited in range(1, 40):
            k = ctrl.choose()
            if k > 0:
                return waited
            ctrl.observe(0, 0, None, 0.02)
        return 40

    assert rounds_to_probe(AdaptiveDepth(probe_every=12)) <= 3
    assert rounds_to_probe(AdaptiveDepth(probe_every=12, positional=False)) >= 10  # the twelfth plain round


# --- Costs under a changing load ---------------------------------------------------------------

QUIET = (0.027, 0.0081)  # the demo pair's one-token pass and each extra batch token (30% of it) on a CPU


def _cpu_costs(ctrl: AdaptiveDepth, load: float, rounds: int, depths: list[int]) -> None:
    """Rounds at ``depths`` in turn on the CPU-like line, ``load`` times slower than quiet; a draft step of 9.5 ms."""
    verify1, per_token = QUIET
    for i in range(rounds):
        k = depths[i % len(depths)]
        ctrl.observe(
            k,
            0,
            0.0095 * load if k > 1 else None,
            load * (verify1 + per_token * k),
            0.0005 * load,
            0.012 * load if k else None,
        )


def test_a_machine_that_slows_down_moves_the_cost_of_every_batch_size() -> None:
    """Plain rounds re-measure the one-token pass under load; batches timed at a quiet moment must follow it.

    They did not: the one-token pass rose to 81 ms, batches of 2-6 tokens kept their quiet 35-67 ms and were
    priced at the floor, the one-token pass, so every extra token of a lookup looked free to verify."""
    ctrl = AdaptiveDepth()
    _cpu_costs(ctrl, 1.0, 3, [0])
    _cpu_costs(ctrl, 1.0, 64, list(range(1, 17)))  # a quiet stretch: every batch size measured
    _cpu_costs(ctrl, 3.0, 15, [0])  # the machine slows threefold; the rounds are plain
    verify1, per_token = QUIET
    assert ctrl.costs.verify_cost(1) == pytest.approx(3 * verify1, rel=0.1)
    for n in range(2, 18):  # each extra token still costs most of what it costs now, not nothing
        assert ctrl.costs.verify_cost(n) - ctrl.costs.verify_cost(1) > 0.8 * 3 * per_token * (n - 1)
    assert ctrl.costs.draft_cost(4) > 0.8 * 3 * (0.012 + 3 * 0.0095)  # drafting, not measured under load, follows too
    # The other way round: drafted rounds alone see the load, and plain decoding's cost follows them.
    drafting = AdaptiveDepth()
    _cpu_costs(drafting, 1.0, 3, [0])
    _cpu_costs(drafting, 1.0, 64, list(range(1, 17)))
    _cpu_costs(drafting, 3.0, 15, [2])
    assert drafting.costs.verify_cost(1) > 0.8 * 3 * verify1
    assert drafting.costs.plain_rate() < 1.2 / (3 * verify1)


def test_auto_falls_back_to_plain_decoding_when_the_load_makes_drafting_lose_and_drafts_again_after() -> None:
    """A draft model that pays on a quiet machine stops paying under load (the target three times slower, the
    draft model, competing with it for the cores, six times): the controller goes to plain decoding within a few
    rounds, keeps probing, and drafts again within a few probes once the machine is quiet, though its costs were
    last measured under load."""
    ctrl = AdaptiveDepth()
    rng = random.Random(3)
    verify1, per_token = QUIET

    def drive(rounds: int, load: float, draft_load: float) -> list[int]:
        chosen = []
        for _ in range(rounds):
            k = ctrl.choose()
            ctrl.observe(
                k,
                _outcome(rng, [0.9], k),
                0.0095 * draft_load if k > 1 else None,
                load * (verify1 + per_token * k),
                0.0005 * load,
                0.012 * draft_load if k else None,
            )
            chosen.append(k)
        return chosen

    quiet = drive(60, 1.0, 1.0)
    assert all(k > 0 for k in quiet[-20:])  # drafting pays: about 13% over plain decoding
    loaded = drive(60, 3.0, 6.0)  # drafting loses: 11 tokens a second at best against plain decoding's 12
    assert 0 in loaded[:6]  # plain decoding within a few rounds
    assert loaded[-40:].count(0) >= 30  # and mostly plain from there...
    assert any(k > 0 for k in loaded[-40:])  # ...probing now and then
    again = drive(80, 1.0, 1.0)  # quiet again: the probes re-measure the draft model's steps and find it pays
    assert all(k > 0 for k in again[-30:])
