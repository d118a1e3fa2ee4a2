"""The composite drafter's per-round choice on synthetic acceptance histories and costs (deterministic)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.composite import (
    CONFIDENCE_EDGES,
    MAX_MATCH,
    PROBE_DEPTH,
    AcceptanceTable,
    Candidate,
    CompositeDrafter,
    Confidence,
    Costs,
    ModelTimings,
    StopPlan,
    choose,
    lookup_prior,
    lookup_tail,
    match_key,
    tuning,
)
from specchat.core.engine.composite.pricing import _Survival
from specchat.core.engine.costs import MAX_VERIFY_SLOPE, CostView, unmeasured_verify_costs
from specchat.core.engine.depth import AdaptiveDepth, expected_tokens, logit, sigmoid
from specchat.core.engine.drafters import Draft, DraftModelDrafter, DraftRequest, draft_model
from specchat.core.engine.lookup import find_match
from specchat.core.engine.realised import RealisedCosts
from specchat.core.types import DraftSource, SamplerParams
from support.draft_contexts import SureContext

LOOKUP, MODEL, MTP = DraftSource.LOOKUP, DraftSource.MODEL, DraftSource.MTP
SPAN = tuple(range(100, 116))  # a 16-token lookup proposal


def costs(model_step: float = 0.01, verify_slope: float = 0.005, n: int = 18) -> Costs:
    """Seconds: a 50 ms one-token verify growing by ``verify_slope`` a token; a draft model step of ``model_step``."""
    return Costs(
        model_fixed=model_step,
        model_step=model_step,
        catch_up_token=model_step / 2,
        verify=tuple(0.05 + verify_slope * (i - 1) for i in range(n)),
        overhead_plain=0.001,
        overhead_drafted=0.001,
    )


def history(table: AcceptanceTable, source: DraftSource, key: int, spans: list[tuple[int, int]]) -> None:
    for length, accepted in spans:
        table.record_span(source, key, 0, length, accepted)


def table() -> AcceptanceTable:
    return AcceptanceTable({LOOKUP: 0.6, MODEL: 0.6})


def test_a_lookup_that_keeps_being_accepted_drafts_long_spans_for_free() -> None:
    t = table()
    history(t, LOOKUP, 4, [(8, 8)] * 10)
    history(t, MODEL, 0, [(4, 1)] * 10)
    best = choose([(4, SPAN)], 16, t, costs(), MODEL)
    assert best.label == "lookup" and best.match == 4 and len(best.lookup) >= 12
    assert best.lookup == SPAN[: len(best.lookup)]


def test_the_model_wins_where_lookup_keeps_missing() -> None:
    t = table()
    history(t, LOOKUP, 1, [(8, 0)] * 10)
    history(t, MODEL, 0, [(6, 6)] * 10)
    best = choose([(1, SPAN)], 16, t, costs(), MODEL)
    assert best.label == "model" and best.lookup == () and best.model >= 4


def test_per_match_length_the_long_match_is_trusted_and_the_short_one_not() -> None:
    t = table()
    history(t, LOOKUP, 5, [(8, 8)] * 10)
    history(t, LOOKUP, 1, [(8, 0)] * 10)
    history(t, MODEL, 0, [(4, 0)] * 10)
    other = tuple(range(200, 216))
    best = choose([(5, SPAN), (1, other)], 16, t, costs(), MODEL)
    assert best.match == 5 and best.lookup[0] == SPAN[0]
    flipped = table()
    history(flipped, LOOKUP, 5, [(8, 0)] * 10)
    history(flipped, LOOKUP, 1, [(8, 8)] * 10)
    history(flipped, MODEL, 0, [(4, 0)] * 10)
    assert choose([(5, SPAN), (1, other)], 16, flipped, costs(), MODEL).match == 1


def test_plain_decoding_when_nothing_is_worth_its_cost() -> None:
    t = table()
    history(t, LOOKUP, 2, [(8, 0)] * 10)
    history(t, MODEL, 0, [(4, 0)] * 10)
    best = choose([(2, SPAN)], 16, t, costs(model_step=0.05, verify_slope=0.03), MODEL)
    assert best == Candidate((), 0, 0, best.rate) and best.label == "plain"
    assert choose([], 16, table(), costs(), None).label == "plain"  # no lookup, no model


def test_an_expensive_model_loses_to_a_free_lookup_of_equal_acceptance() -> None:
    t = table()
    history(t, LOOKUP, 3, [(4, 2)] * 10)
    history(t, MODEL, 0, [(4, 2)] * 10)
    assert choose([(3, SPAN)], 16, t, costs(model_step=0.04), MODEL).label == "lookup"


def test_the_choice_is_deterministic_and_within_the_depth() -> None:
    t = table()
    history(t, LOOKUP, 2, [(5, 3), (8, 8), (2, 0)])
    history(t, MODEL, 0, [(3, 2), (5, 5)])
    picks = {choose([(2, SPAN)], k, t, costs(), MODEL) for _ in range(3) for k in (5,)}
    assert len(picks) == 1
    (pick,) = picks
    assert len(pick.lookup) + pick.model <= 5


def test_acceptance_adapts_within_a_few_rounds_and_deep_positions_lean_on_shallow_ones() -> None:
    t = table()
    assert t.rate(LOOKUP, 3, 0) == lookup_prior(3) < lookup_prior(6) < lookup_prior(16)  # longer: trusted more
    assert t.rate(LOOKUP, 3, 1) == lookup_prior(3, 1)  # later positions: their own measured prior
    history(t, LOOKUP, 3, [(4, 4)] * 8)
    high = t.rate(LOOKUP, 3, 0)
    assert high > 0.85
    assert t.rate(LOOKUP, 3, 12) > 0.85  # never checked that deep: leans on the positions before
    history(t, LOOKUP, 3, [(4, 0)] * 6)
    assert t.rate(LOOKUP, 3, 0) < lookup_prior(3) < high
    assert t.rate(LOOKUP, 4, 0) == lookup_prior(4)  # another match length keeps its own figures
    rates = t.rates(MODEL, 0, 3)
    assert rates == [0.6, 0.6, 0.6]


def test_match_keys_are_exact_for_short_matches_and_bucketed_for_long_ones() -> None:
    assert [match_key(n) for n in (0, 1, 5, 6, 7, 8, 11, 12, 31, 32, 99)] == [0, 1, 5, 6, 6, 8, 8, 12, 24, 32, 32]
    assert lookup_prior(7) == lookup_prior(6) and lookup_prior(40) == lookup_prior(32)


def test_find_match_follows_a_match_back_to_its_real_length() -> None:
    text = np.array([9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 3, 4, 5], dtype=np.int64)
    follow, length = find_match(text, 2, max_length=MAX_MATCH)  # "4 5": the latest earlier match is at 4,
    assert (follow, length) == (6, 3) and text[follow] == 6  # followed back to "3 4 5"
    assert find_match(text, 2) == (6, 2)  # not followed back: the n-gram's own length
    assert find_match(text, 3, max_length=MAX_MATCH) == (6, 3)
    assert find_match(np.array([1, 2, 3], dtype=np.int64), 2, max_length=MAX_MATCH) == (-1, 0)  # no earlier "2 3"
    copy = np.array(list(range(100)) + list(range(60)), dtype=np.int64)
    assert find_match(copy, 6, max_length=MAX_MATCH) == (60, MAX_MATCH)  # a copy's match runs back as far as asked
    corpus = np.array([7, 7, 1, 2, 3, 4, 8], dtype=np.int64)
    assert find_match(np.array([5, 2, 3, 4], dtype=np.int64), 2, corpus, max_length=MAX_MATCH) == (6, 3)  # memory


def test_the_model_s_drafts_are_continued_by_a_lookup_where_they_reach_copied_text() -> None:
    t = table()
    history(t, MODEL, 0, [(4, 4)] * 10)
    model_rates = t.rates(MODEL, 0, 4)
    assert lookup_tail(model_rates, (20, SPAN), 16, t, costs()) == 12  # a long match: up to the depth
    assert lookup_tail(model_rates, (20, SPAN), 4, t, costs()) == 0  # no room left
    assert lookup_tail(model_rates, None, 16, t, costs()) == 0
    history(t, LOOKUP, 1, [(8, 0)] * 10)
    assert lookup_tail(model_rates, (1, SPAN), 16, t, costs(verify_slope=0.02)) == 0  # a poor match: not worth it


def test_a_stale_verify_cost_fit_cannot_price_drafting_out() -> None:
    """A batch measured once at a moment of heavy load leaves the depth controller's line far too steep;
    the composite caps what each extra token costs, so drafting resumes instead of plain rounds for ever."""
    adaptive = AdaptiveDepth()
    for _ in range(5):
        adaptive.observe(0, 0, None, 0.025)  # plain rounds: 25 ms
    adaptive.observe(16, 3, 0.01, 0.9)  # one 17-token batch at a load spike: 900 ms
    assert adaptive.costs.verify_cost(9) > 0.4
    drafter = CompositeDrafter.__new__(CompositeDrafter)
    drafter.timings = ModelTimings()
    drafter._unread = None
    drafter.model = DraftModelDrafter(SureContext())
    drafter.realised, drafter._round = RealisedCosts(), 0
    request = DraftRequest(
        [1, 2, 3], 16, SamplerParams(), np.random.default_rng(0), CancelToken(), costs=adaptive.costs
    )
    priced = drafter.costs(request)
    assert priced.verify[1] == adaptive.costs.verify_cost(1)
    assert priced.verify[9] <= priced.verify[1] * (1 + MAX_VERIFY_SLOPE * 8) + 1e-12
    assert choose([(20, SPAN)], 16, table(), priced, MODEL).label == "lookup"


class FixedCosts:
    """A cost view with set figures: all a drafter may read of the round costs."""

    def measured_plain(self) -> bool:
        return True

    def verify_costs(self, n_max: int) -> tuple[float, ...]:
        return tuple(0.02 + 0.001 * n for n in range(n_max))

    def overhead(self, drafted: bool) -> float:
        return 0.002 if drafted else 0.001


def test_the_composite_prices_its_rounds_from_the_narrow_cost_view() -> None:
    drafter = CompositeDrafter(DraftModelDrafter(SureContext()))
    view: CostView = FixedCosts()
    request = DraftRequest([1, 2, 3], 8, SamplerParams(), np.random.default_rng(0), CancelToken(), costs=view)
    priced = drafter.costs(request)
    assert priced.verify == view.verify_costs(10)
    assert (priced.overhead_plain, priced.overhead_drafted) == (0.001, 0.002)
    assert priced.model_step == pytest.approx(0.3 * 0.021)  # an unmeasured model: a step guessed from the pass
    unmeasured = drafter.costs(dataclasses.replace(request, costs=None))
    assert unmeasured.verify == unmeasured_verify_costs(10)  # in units of a one-token pass


def test_one_deep_rejection_does_not_cut_a_model_that_keeps_being_accepted() -> None:
    """Deep positions are checked only when drafted that deep: one miss there reads against every position pooled."""
    t = table()
    history(t, MODEL, 0, [(8, 8)] * 12 + [(16, 9)])
    rates = t.rates(MODEL, 0, 16)
    assert min(rates) > 0.9 and rates[0] > 0.95
    assert choose([], 16, t, costs(model_step=0.004, verify_slope=0.002), MODEL).model >= 12
    falling = AcceptanceTable({MTP: 0.6}, by_position=True)  # heads lose acceptance with every chained step
    history(falling, MTP, 0, [(8, 2)] * 20)
    shape = falling.rates(MTP, 0, 6)
    assert shape[0] > 0.85 and shape[2] < 0.3
    history(t, MODEL, 0, [(8, 2)] * 3)  # a draft model's misses lower every position alike
    assert len(set(t.rates(MODEL, 0, 16))) == 1


def test_confidence_buckets_start_at_the_model_s_average_and_learn_a_hesitant_model() -> None:
    c = Confidence()
    assert Confidence.bucket(0.1) == 0 and Confidence.bucket(CONFIDENCE_EDGES[0]) == 1
    assert Confidence.bucket(1.0) == len(CONFIDENCE_EDGES)
    assert c.rate(0.2, 0.8, 0.8) == c.rate(0.99, 0.8, 0.8) == 0.8  # nothing measured: the position's rate
    for _ in range(40):
        c.record(0.2, False)
        c.record(0.99, True)
    assert c.rate(0.2, 0.8, 0.8) < 0.2 and c.rate(0.99, 0.8, 0.8) > 0.95
    assert c.rate(0.6, 0.8, 0.8) == 0.8  # another bucket keeps its own (no) counts
    # A reply where the model guesses better than on average lifts the hesitant bucket with it.
    assert c.rate(0.2, 0.99, 0.8) > 3 * c.rate(0.2, 0.8, 0.8)


def sure_model_drafter() -> CompositeDrafter:
    """A composite drafter whose model keeps being accepted and is never wrong when sure, often when hesitant."""
    drafter = CompositeDrafter.__new__(CompositeDrafter)
    drafter.model_source, drafter.max_ngram, drafter.memory = MODEL, 6, None
    drafter.table = table()
    history(drafter.table, MODEL, 0, [(8, 8)] * 12)
    drafter.confidence = Confidence()
    for _ in range(20):
        drafter.confidence.record(0.2, False)
        drafter.confidence.record(0.99, True)
    return drafter


def test_the_model_drafts_on_while_its_confidence_pays_and_stops_after_a_hesitant_token() -> None:
    drafter = sure_model_drafter()
    ahead = list(range(500, 540))  # nothing the drafts below repeat
    keep_going = drafter._stopper(ahead, 16, costs(model_step=0.004, verify_slope=0.002))
    for i in range(1, 12):  # sure drafts: on past what the position rates alone chose
        assert keep_going(list(range(900, 900 + i)), [0.99] * i)
    assert not keep_going([900, 901, 902], [0.99, 0.99, 0.2])  # after a hesitant one the next decode is likely wasted
    assert not keep_going(list(range(900, 916)), [0.99] * 16)  # never past the depth asked for
    dear = drafter._stopper(ahead, 16, costs(model_step=0.06, verify_slope=0.01))
    assert not dear([900, 901, 902, 903], [0.99, 0.99, 0.99, 0.2])  # a dear model stops sooner


def test_the_model_hands_over_to_a_lookup_once_its_drafts_reach_quoted_text() -> None:
    drafter = sure_model_drafter()
    history(drafter.table, LOOKUP, 24, [(16, 16)] * 6)  # long matches have been copies
    quote = list(range(700, 740))
    ahead = [*range(500, 520), *quote, *range(600, 610)]  # the prompt holds a passage; the reply starts quoting it
    keep_going = drafter._stopper(ahead, 16, costs(model_step=0.004, verify_slope=0.002))
    assert keep_going([800, 801], [0.99, 0.99])  # the drafts so far match nothing: the model goes on
    assert keep_going(quote[:7], [0.99] * 7)  # they reach the passage: the lookup proposes its next token...
    assert not keep_going(quote[:8], [0.99] * 8)  # ...the model drafts it too: the lookup continues for free
    renamed = drafter._stopper(ahead, 16, costs(model_step=0.004, verify_slope=0.002))
    assert renamed(quote[:7], [0.99] * 7)
    assert renamed([*quote[:7], 999], [0.99] * 8)  # the model parts from the passage (a rename): it goes on
    short = drafter._stopper(
        [*range(500, 520), 42, 43, 44, *range(600, 610)], 16, costs(model_step=0.004, verify_slope=0.002)
    )
    assert short([900, 42], [0.99] * 2) and short([900, 42, 43], [0.99] * 3)  # two tokens seen before: no quote


def test_a_first_draft_that_agrees_with_the_round_s_lookup_confirms_the_hand_over() -> None:
    """A reply that starts by repeating an earlier one: the model's first draft is the lookup's, and it hands over."""
    drafter = sure_model_drafter()
    history(drafter.table, LOOKUP, 24, [(16, 16)] * 6)
    quote = list(range(700, 740))
    ahead = [*range(500, 520), *quote, *range(600, 610), *quote[:5]]  # the reply has begun repeating the passage
    lookups = drafter.lookups(ahead, 16)
    assert max(lookups)[1][0] == quote[5]
    cost = costs(model_step=0.004, verify_slope=0.002)
    told = drafter._stopper(ahead, 16, cost, None, lookups)
    assert told([], [])
    assert not told([quote[5]], [0.99])  # one draft confirms the round's own lookup: it continues for free
    assert drafter._stopper(ahead, 16, cost)([quote[5]], [0.99])  # unconfirmed, the model drafts on
    parted = drafter._stopper(ahead, 16, cost, None, lookups)
    assert parted([999], [0.99])  # the model parts from the repeat at once: it goes on


def test_a_reply_that_would_start_with_plain_rounds_probes_the_model_at_once() -> None:
    """Earlier replies priced the model out; a new reply may differ, so its first plain round drafts a little."""
    drafter = CompositeDrafter(DraftModelDrafter(SureContext()))
    history(drafter.table, MODEL, 0, [(4, 0)] * 30)  # earlier replies: the model kept missing
    drafter.timings.fixed = drafter.timings.step = 0.3  # its costs are measured (no unmeasured-model rounds)
    rng = np.random.default_rng(0)

    def ask(tokens: list[int]) -> list[DraftSource]:
        return drafter.draft(DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken())).sources

    prompt = [5, 6, 7, 8]  # nothing to look up
    drafter.prefill(prompt[:-1])
    assert ask(prompt) == [MODEL] * PROBE_DEPTH
    assert ask([*prompt, 9]) == []  # the probe missed: plain rounds, the usual probes from here
    assert ask([*prompt, 9, 10]) == []


def hesitant_pair() -> tuple[Confidence, float]:
    """A model whose sure drafts are always right and whose hesitant ones (a fifth) are right 40% of the time."""
    c = Confidence(decay=1.0)
    for i in range(50):
        if i % 5:
            c.record(0.995, True)
        else:
            c.record(0.2, i % 25 < 10)
    return c, (40 + 4) / 50


def test_the_stop_plan_counts_the_option_to_stop_after_a_hesitant_draft() -> None:
    confidence, average = hesitant_pair()
    priced = costs(model_step=0.01, verify_slope=0.004)
    n = 16
    plan = StopPlan.for_round([average] * n, confidence, average, priced)
    tokens, seconds = plan.expected(1.0)
    planned = (1.0 + tokens) / (priced.verify[1] + priced.overhead_drafted + seconds)
    fixed = max(expected_tokens(average, d) / priced.round(d, d) for d in range(1, n + 1))
    assert planned > 1.1 * fixed  # at the average rate every depth is worth less than the plan that can stop
    sure = confidence.rate(0.995, average, average)
    hesitant = confidence.rate(0.2, average, average)
    assert plan.gain(4, sure**4) > 0.0  # four sure drafts: draft on
    assert plan.gain(4, sure**3 * hesitant) < 0.0  # the fourth hesitant: the round likely ends there
    assert plan.gain(n, 1.0) == 0.0  # never past the depth asked for


def test_the_stop_plan_s_expectations_match_a_simulation_of_it() -> None:
    confidence, average = hesitant_pair()
    priced = costs(model_step=0.01, verify_slope=0.004)
    rates = [average - 0.01 * j for j in range(12)]  # acceptance falling with the position, as with MTP heads
    plan = StopPlan.for_round(rates, confidence, average, priced)
    shifts, weights = confidence.shifts(average)
    rng = np.random.default_rng(7)
    trials, tokens, seconds = 20000, 0.0, 0.0
    for _ in range(trials):
        belief, alive, j = 1.0, True, 0
        while j == 0 or plan.gain(j, belief) > 0.0:
            accept = sigmoid(logit(rates[j]) + shifts[rng.choice(len(weights), p=weights)])
            seconds += priced.model_fixed if j == 0 else priced.model_step
            seconds += priced.verify[j + 2] - priced.verify[j + 1]
            belief *= accept
            alive = alive and rng.random() < accept
            tokens += alive
            j += 1
    want_tokens, want_seconds = plan.expected(1.0)
    assert abs(tokens / trials - want_tokens) < 0.03 * want_tokens
    assert abs(seconds / trials - want_seconds) < 0.03 * want_seconds


def test_the_stop_plan_interpolates_exactly_as_numpy_does() -> None:
    """The plan looks up each survival's grid cell once a round (half its cost); what it interpolates there is
    ``np.interp``'s, to the bit below the grid's last point, within a rounding at it."""
    confidence, average = hesitant_pair()
    shifts, _ = confidence.shifts(average)
    values = np.random.default_rng(3).random(len(tuning.STOP_GRID)) * 5.0 - 1.0
    for rate in (0.01, 0.5, average, 0.97):
        survival = _Survival.of(rate, shifts)
        assert survival.points.min() == 0.0 and survival.points.max() > 0.0
        assert np.array_equal(survival.at(values), np.interp(survival.points, tuning.STOP_GRID, values))
    on_the_grid = _Survival(tuning.STOP_GRID[:-1].copy())
    assert np.array_equal(on_the_grid.at(values), values[:-1])
    assert np.isclose(_Survival(tuning.STOP_GRID[-1:].copy()).at(values)[0], values[-1], rtol=1e-15, atol=0.0)


def test_the_stop_plan_builds_one_survival_per_distinct_position_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft model's positions share its pooled rate: a round of 16 builds one survival table, not 16."""
    confidence, average = hesitant_pair()
    priced = costs(model_step=0.01, verify_slope=0.004)
    built: list[float] = []
    real = _Survival.of

    def of(rate: float, shifts: np.ndarray) -> _Survival:
        built.append(rate)
        return real(rate, shifts)

    monkeypatch.setattr(_Survival, "of", of)
    shared = StopPlan.for_round([average] * 16, confidence, average, priced)
    assert built == [average]
    built.clear()
    StopPlan.for_round([0.9] * 8 + [0.8] * 8, confidence, average, priced)
    assert built == [0.9, 0.8]
    monkeypatch.undo()
    shifts, weights = confidence.shifts(average)
    separate = [_Survival.of(average, shifts) for _ in range(16)]
    own = StopPlan(separate, weights, StopPlan.step_costs(priced, 16), shared.rate)
    assert all(np.array_equal(a, b) for a, b in zip(own.gains, shared.gains, strict=True))
    assert own.expected(1.0) == shared.expected(1.0)


def test_tokens_committed_without_the_draft_model_are_charged_its_catch_up() -> None:
    """A draft model decodes what lookup rounds committed when it next drafts: at a near tie that decides."""
    t = table()
    history(t, LOOKUP, 3, [(8, 4)] * 10)  # the lookup keeps about half its span
    history(t, MODEL, 0, [(8, 8)] * 10)
    free = dataclasses.replace(costs(model_step=0.01), catch_up_token=0.0)
    assert choose([(3, SPAN[:8])], 16, t, free, MODEL).label == "lookup"
    priced = dataclasses.replace(free, catch_up_token=0.005)
    assert choose([(3, SPAN[:8])], 16, t, priced, MODEL).label == "model"
    assert priced.sat_out(4, 3.0) == pytest.approx(free.sat_out(4, 3.0) + 3 * 0.005)


def test_the_composite_learns_the_draft_model_s_catch_up_per_token(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()  # the sync's pause is counted, not slept: a busy machine cannot stretch it
    monkeypatch.setattr(f"{draft_model.__name__}.time.perf_counter", clock)
    drafter = CompositeDrafter(DraftModelDrafter(LaggingContext(lag=12, sync_pause=0.03, clock=clock)))
    drafter.timings.fixed = 0.1  # in units of a one-token verify pass (below: 0.05 s)
    out = Draft()
    drafter._draft_model(
        out, DraftRequest(list(range(40)), 2, SamplerParams(), np.random.default_rng(0), CancelToken()), 2, 0.05
    )
    assert out.tokens and drafter.timings.catch_up is not None
    assert drafter.timings.catch_up == pytest.approx((0.03 / 0.05 - 0.1) / 11, rel=0.5)  # 0.03 s over 12 tokens
    request = DraftRequest([1, 2, 3], 16, SamplerParams(), np.random.default_rng(0), CancelToken())
    priced = drafter.costs(request)
    assert priced.catch_up_token == pytest.approx(drafter.timings.catch_up * priced.verify[1])


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class LaggingContext:
    """A dense draft context that is ``lag`` tokens behind at every sync, which takes ``sync_pause`` seconds
    (slept, or added to ``clock``)."""

    n_ctx = 256
    restored = False
    tried_decodes = 0

    def __init__(self, lag: int, sync_pause: float, clock: FakeClock | None = None) -> None:
        self.lag, self.sync_pause, self.clock = lag, sync_pause, clock
        self.tokens: list[int] = []

    def extend_to(self, tokens: Sequence[int]) -> int:
        return 0

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        if self.clock is not None:
            self.clock.now += self.sync_pause
        else:
            time.sleep(self.sync_pause)
        return np.array([0.0, 3.0, 1.0, 0.5], dtype=np.float32), len(tokens) - self.lag

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        return np.array([[0.0, 3.0, 1.0, 0.5]], dtype=np.float32)

    def checkpoint(self, slot: str) -> None:
        pass


def test_a_draft_model_far_behind_pays_its_catch_up_in_the_round_that_drafts() -> None:
    """After lookup rounds copied a passage, the model's next round decodes all of it first (m-proofread's end)."""
    t = table()
    history(t, MODEL, 0, [(8, 6)] * 10)
    in_step = dataclasses.replace(costs(model_step=0.01), catch_up_token=0.005)
    assert choose([], 16, t, in_step, MODEL).label == "model"
    behind = dataclasses.replace(in_step, behind=40)
    assert behind.model(3) == pytest.approx(in_step.model(3) + 40 * 0.005)
    assert choose([], 16, t, behind, MODEL).label == "plain"


def test_the_draft_model_drafter_says_how_far_behind_its_context_is() -> None:
    context = SureContext()
    drafter = DraftModelDrafter(context)
    drafter.prefill(list(range(10)))
    assert drafter.behind(list(range(12))) == 0  # the last token or two: every round's usual catch-up
    assert drafter.behind(list(range(30))) == 18
    assert drafter.behind([*range(5), 99, *range(6, 12)]) == 5  # parted at position 5: decoded again from there
    composite = CompositeDrafter(drafter)
    request = DraftRequest(list(range(30)), 16, SamplerParams(), np.random.default_rng(0), CancelToken())
    assert composite.costs(request).behind == 18


def test_lookups_that_keep_missing_stay_unpriced_when_the_machine_slows_down() -> None:
    """Seen in the window under load: 16-token lookup rounds at 5% acceptance, never plain decoding.

    A CPU-like verify line (27 ms, each extra token 30% of that) measured on a quiet machine; then the
    machine slows threefold and plain rounds re-time the one-token pass. The batches' costs stayed quiet, the
    one-token pass floored them, and every extra token of a lookup read as free to verify."""
    adaptive = AdaptiveDepth()
    for load, rounds, sizes in ((1.0, 3, [0]), (1.0, 64, list(range(1, 17))), (3.0, 12, [0])):
        for i in range(rounds):
            k = sizes[i % len(sizes)]
            adaptive.observe(k, 0, 0.0 if k else None, load * 0.027 * (1 + 0.3 * k), 0.0005 * load)
    drafter = CompositeDrafter(DraftModelDrafter(SureContext()))
    drafter.timings = ModelTimings(0.45, 0.35, 0.15)  # units of a one-token pass
    for key in (1, 2, 4, 8, 16):  # lookups of every match length keep 1 first token in 20
        history(drafter.table, LOOKUP, key, [(16, 0)] * 19 + [(16, 1)])
    history(drafter.table, MODEL, 0, [(4, 2)] * 10)  # the draft model: about 56%
    request = DraftRequest(
        list(range(40)), 16, SamplerParams(), np.random.default_rng(0), CancelToken(), costs=adaptive.costs
    )
    priced = drafter.costs(request)
    assert priced.verify[2] - priced.verify[1] > 0.2 * priced.verify[1]  # an extra token is not free to verify
    for key in (1, 4, 8, 16):
        assert choose([(key, SPAN)], 16, drafter.table, priced, MODEL).label == "plain"


def test_a_long_match_s_prior_ages_with_the_counts_that_contradict_it() -> None:
    """A 16-token match's prior says 95%; lookups there keep 1 first token in 20. The prior kept 4 of the cell's
    24 decayed observations for ever: 29%, and on a CPU-like verify line (each extra token 30% of a one-token
    pass) a lookup beat plain decoding where it loses a sixth of the speed."""
    t = table()
    for _ in range(3):
        history(t, LOOKUP, 16, [(16, 0)] * 19 + [(16, 1)])
    assert t.rate(LOOKUP, 16, 0) < 0.1
    cpu = Costs(
        model_fixed=0.45 * 0.027,
        model_step=0.35 * 0.027,
        catch_up_token=0.15 * 0.027,
        verify=tuple(0.027 * (1 + 0.3 * (n - 1)) for n in range(18)),
        overhead_plain=0.0005,
        overhead_drafted=0.0005,
    )
    assert choose([(16, SPAN)], 16, t, cpu, None).label == "plain"
    fresh = table()  # before any count the prior stands
    assert fresh.rate(LOOKUP, 16, 0) == lookup_prior(16)


def test_one_table_follows_a_reply_that_stops_copying_within_a_few_rounds() -> None:
    """Every reply's figures sit in one decaying table: earlier copies made short matches trusted, and this
    reply's misses move the choice to the model within a few rounds, while long matches keep their own counts."""
    t = table()
    history(t, LOOKUP, 4, [(8, 8)] * 4)  # earlier replies: copies
    history(t, MODEL, 0, [(4, 4)] * 10)
    long_before = t.rate(LOOKUP, 16, 0)
    priced = costs(model_step=0.008)
    assert choose([(4, SPAN)], 16, t, priced, MODEL).label == "lookup"
    misses = 0
    while choose([(4, SPAN)], 16, t, priced, MODEL).label == "lookup":
        history(t, LOOKUP, 4, [(4, 0)])  # this reply: the short match misses at once
        misses += 1
        assert misses <= 4
    assert misses >= 1 and choose([(4, SPAN)], 16, t, priced, MODEL).label == "model"
    assert t.rate(LOOKUP, 16, 0) == long_before


class ReadingContext(SureContext):
    """A sure draft context that records every prompt it is asked to read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[list[int]] = []

    def extend_to(self, tokens: Sequence[int]) -> int:
        self.reads.append(list(tokens))
        return super().extend_to(tokens)


def test_the_model_reads_the_prompt_only_when_it_first_drafts() -> None:
    """A reply that starts by copying needs no draft model for its first token: it reads the prompt later."""
    context = ReadingContext()
    drafter = CompositeDrafter(DraftModelDrafter(context))
    drafter.timings.fixed = drafter.timings.step = 0.3  # measured: no forced model rounds
    history(drafter.table, LOOKUP, 16, [(16, 16)] * 20)  # long matches have been copies
    history(drafter.table, MODEL, 0, [(4, 4)] * 10)
    quote = list(range(100, 140))
    prompt = [*range(10, 30), *quote, *range(60, 70), *quote[:16]]  # the reply has begun quoting
    rng = np.random.default_rng(0)

    def ask(tokens: list[int]) -> Draft:
        return drafter.draft(DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken()))

    drafter.prefill(prompt[:-1])
    assert context.reads == []  # not read yet
    request = DraftRequest([*prompt, *quote[16:20]], 8, SamplerParams(), rng, CancelToken())
    eager = DraftModelDrafter(SureContext())
    eager.prefill(prompt[:-1])
    assert drafter.costs(request).behind == eager.behind(request.tokens) == 3  # priced as if it had read it
    first = ask(prompt)
    assert first.sources and set(first.sources) == {LOOKUP} and context.reads == []
    ahead = [*prompt, *first.tokens, 900, 901]  # the reply leaves the quote: nothing to look up
    second = ask(ahead)
    assert MODEL in second.sources
    assert context.reads == [prompt[:-1]]  # read once, just before the model's first draft
    assert context.tokens[: len(ahead)] == ahead  # and caught up on what the reply committed


def reading_composite(n_ctx: int = 256) -> tuple[ReadingContext, CompositeDrafter]:
    """A composite over a recording sure context, its model measured: a token read costs a twentieth of a pass,
    and its drafts have always been right."""
    context = ReadingContext()
    context.n_ctx = n_ctx
    drafter = CompositeDrafter(DraftModelDrafter(context))
    drafter.timings.fixed = drafter.timings.step = 0.3
    drafter.timings.catch_up = 0.05
    history(drafter.table, MODEL, 0, [(4, 4)] * 10)
    return context, drafter


def test_a_first_round_that_would_wait_for_the_prompts_read_is_plain() -> None:
    """The first token does not wait for the model to read a long prompt: the model reads it in the next round,
    which drafts as a first round would; a prompt read in less than what the round gains is read at once."""
    for length, deferred in ((240, True), (12, False)):
        # 240 tokens cost twelve target passes to read; a round of eight sure drafts gains less than six
        context, drafter = reading_composite()
        prompt = list(range(10, 10 + length))  # nothing to look up
        rng = np.random.default_rng(0)
        drafter.prefill(prompt[:-1])
        first = drafter.draft(DraftRequest(prompt, 8, SamplerParams(), rng, CancelToken()))
        if deferred:
            assert first.tokens == [] and context.reads == [] and drafter.wins["plain"] == 1
            second = drafter.draft(DraftRequest([*prompt, 500], 8, SamplerParams(), rng, CancelToken()))
            assert second.sources[:1] == [MODEL] and context.reads == [prompt[:-1]]
        else:
            assert first.sources[:1] == [MODEL] and context.reads == [prompt[:-1]]


def test_the_model_reads_a_long_prompt_only_where_the_rest_of_the_reply_repays_the_read() -> None:
    """A 400-token prompt costs the model twenty target passes to read: a reply with 24 tokens left cannot win
    that back (its rounds go without the model), one with 2,000 left can (the model reads, then drafts)."""
    for remaining, reads in ((24, False), (2000, True)):
        context, drafter = reading_composite(4096)
        prompt = list(range(10, 410))  # nothing to look up
        rng = np.random.default_rng(0)
        drafter.prefill(prompt[:-1])
        tokens = list(prompt)
        sources: list[DraftSource] = []
        for i in range(4):
            draft = drafter.draft(DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken(), remaining=remaining - i))
            sources += draft.sources
            tokens.append(1000 + i)
        assert (MODEL in sources) is reads and (context.reads == [prompt[:-1]]) is reads


def test_without_a_token_limit_a_usual_replys_length_decides_the_read() -> None:
    """Where replies here run to a few tokens, a long prompt is not worth the model's read even with no token
    limit; where they run long, it is."""
    for usual, reads in ((6, False), (2000, True)):
        context, drafter = reading_composite(8192)
        rng = np.random.default_rng(0)
        earlier = list(range(5000, 5010))  # too short a read to be timed
        drafter.prefill(earlier[:-1])
        drafter.draft(DraftRequest([*earlier, *range(6000, 6000 + usual)], 8, SamplerParams(), rng, CancelToken()))
        context.reads.clear()
        prompt = list(range(10, 410))  # nothing to look up; twenty target passes to read
        drafter.prefill(prompt[:-1])
        tokens, sources = list(prompt), []
        for i in range(4):
            sources += drafter.draft(DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken())).sources
            tokens.append(1000 + i)
        assert (MODEL in sources) is reads and (context.reads == [prompt[:-1]]) is reads


class QuickReader(DraftModelDrafter):
    """A draft model whose prompt reads take a thousandth of a target pass a token (as timed by its prefill)."""

    def prefill(self, tokens: Sequence[int]) -> None:
        super().prefill(tokens)
        self.read = (self.read[0], self.read[0] * 0.001)


def test_a_timed_read_replaces_the_estimate() -> None:
    """Once the model's read of a prompt is timed, that time prices the next read: a read found quick is made
    even where the rest of the reply is short."""
    context = ReadingContext()
    context.n_ctx = 4096
    drafter = CompositeDrafter(QuickReader(context))
    drafter.timings.fixed = drafter.timings.step = 0.3
    drafter.timings.catch_up = 0.05  # the estimate before a read is timed: twenty passes for 400 tokens
    history(drafter.table, MODEL, 0, [(4, 4)] * 10)
    rng = np.random.default_rng(0)
    for n, prompt in enumerate((list(range(10, 410)), list(range(2000, 2400)))):
        drafter.prefill(prompt[:-1])
        tokens, sources = list(prompt), []
        for i in range(3):
            left = 2000 if n == 0 else 24  # the first reply is long enough to pay the estimate; the second not
            sources += drafter.draft(
                DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken(), remaining=left - i)
            ).sources
            tokens.append(1000 + i)
        assert MODEL in sources and context.reads[-1] == prompt[:-1], n
    assert drafter.timings.read_token is not None and drafter.timings.read_token < 0.01


def test_where_prompts_come_back_a_read_counts_for_the_next_reply_too() -> None:
    """40 tokens left do not repay a 400-token read for one reply, but do where the target has been finding its
    prompts held already (an agent resending its conversation): the read serves the next turn too."""
    for share, reads in ((0.0, False), (1.0, True)):
        context, drafter = reading_composite(4096)
        for _ in range(30):
            drafter.prompt_reused(share)
        prompt = list(range(10, 410))
        rng = np.random.default_rng(0)
        drafter.prefill(prompt[:-1])
        tokens, sources = list(prompt), []
        for i in range(4):
            sources += drafter.draft(
                DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken(), remaining=40 - i)
            ).sources
            tokens.append(1000 + i)
        assert (MODEL in sources) is reads and (context.reads == [prompt[:-1]]) is reads


def test_a_model_never_timed_reads_the_prompt_after_the_first_round_to_find_out() -> None:
    """What the model would save is a guess until it has drafted here: one never timed reads a 400-token prompt in
    the reply's second round where a timed one with the same table waits out a 24-token reply (the test above)."""
    for timed in (True, False):
        context, drafter = reading_composite(4096)
        if not timed:
            drafter.timings = ModelTimings()
        prompt = list(range(10, 410))  # nothing to look up; twenty target passes to read
        rng = np.random.default_rng(0)
        drafter.prefill(prompt[:-1])
        tokens, firsts = list(prompt), []
        for i in range(4):
            draft = drafter.draft(DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken(), remaining=24 - i))
            firsts.append(draft.sources[:1])
            tokens.append(1000 + i)
        assert firsts[0] == []  # the first token never waits for the read
        assert (firsts[1] == [MODEL]) is (not timed) and (context.reads == [prompt[:-1]]) is (not timed)
