"""The composite drafter's per-round choice on synthetic acceptance histories and costs (deterministic)."""

from __future__ import annotations

from specchat.core.engine.composite import AcceptanceTable, Candidate, Costs, choose, lookup_prior
from specchat.core.types import DraftSource

LOOKUP, MODEL = DraftSource.LOOKUP, DraftSource.MODEL
SPAN = tuple(range(100, 116))  # a 16-token lookup proposal


def costs(model_step: float = 0.01, verify_slope: float = 0.005, n: int = 18) -> Costs:
    """Seconds: a 50 ms one-token verify growing by ``verify_slope`` a token; a draft model step of ``model_step``."""
    return Costs(model_fixed=model_step, model_step=model_step, catch_up_token=model_step / 2,
                 verify=tuple(0.05 + verify_slope * (i - 1) for i in range(n)), overhead_plain=0.001,
                 overhead_drafted=0.001)


def history(table: AcceptanceTable, source: DraftSource, key: int, spans: list[tuple[int, int]]) -> None:
    for length, accepted in spans:
        table.record_span(source, key, 0, length, accepted)


def table() -> AcceptanceTable:
    return AcceptanceTable({LOOKUP: 0.6, MODEL: 0.6})


def test_a_lookup_that_keeps_being_accepted_drafts_long_spans_for_free() -> None:
    t = table()
    history(t, LOOKUP, 4, [(8, 8)] * 10)
    history(t, MODEL, 0, [(4, 1)] * 10)
    best = choose([(4, SPAN)], 16, t, costs(), MODEL, True)
    assert best.label == "lookup" and best.match == 4 and len(best.lookup) >= 12
    assert best.lookup == SPAN[: len(best.lookup)]


def test_the_model_wins_where_lookup_keeps_missing() -> None:
    t = table()
    history(t, LOOKUP, 1, [(8, 0)] * 10)
    history(t, MODEL, 0, [(6, 6)] * 10)
    best = choose([(1, SPAN)], 16, t, costs(), MODEL, True)
    assert best.label == "model" and best.lookup == () and best.model >= 4


def test_per_match_length_the_long_match_is_trusted_and_the_short_one_not() -> None:
    t = table()
    history(t, LOOKUP, 5, [(8, 8)] * 10)
    history(t, LOOKUP, 1, [(8, 0)] * 10)
    history(t, MODEL, 0, [(4, 0)] * 10)
    other = tuple(range(200, 216))
    best = choose([(5, SPAN), (1, other)], 16, t, costs(), MODEL, True)
    assert best.match == 5 and best.lookup[0] == SPAN[0]
    flipped = table()
    history(flipped, LOOKUP, 5, [(8, 0)] * 10)
    history(flipped, LOOKUP, 1, [(8, 8)] * 10)
    history(flipped, MODEL, 0, [(4, 0)] * 10)
    assert choose([(5, SPAN), (1, other)], 16, flipped, costs(), MODEL, True).match == 1


def test_a_short_trusted_span_is_continued_by_the_model() -> None:
    t = table()
    history(t, LOOKUP, 3, [(3, 3)] * 10)
    history(t, MODEL, 0, [(6, 3)] * 10)  # the model keeps about three
    best = choose([(3, SPAN[:3])], 16, t, costs(model_step=0.002), MODEL, True)
    assert best.label == "splice" and best.lookup == SPAN[:3] and best.model >= 2
    # A dearer model is not worth adding to the sure span.
    assert choose([(3, SPAN[:3])], 16, t, costs(model_step=0.01), MODEL, True).label == "lookup"
    # MTP heads draft only from the target's state: no splice.
    assert choose([(3, SPAN[:3])], 16, t, costs(), MODEL, False).label in {"lookup", "model"}


def test_plain_decoding_when_nothing_is_worth_its_cost() -> None:
    t = table()
    history(t, LOOKUP, 2, [(8, 0)] * 10)
    history(t, MODEL, 0, [(4, 0)] * 10)
    best = choose([(2, SPAN)], 16, t, costs(model_step=0.05, verify_slope=0.03), MODEL, True)
    assert best == Candidate((), 0, 0, best.rate) and best.label == "plain"
    assert choose([], 16, table(), costs(), None, False).label == "plain"  # no lookup, no model


def test_an_expensive_model_loses_to_a_free_lookup_of_equal_acceptance() -> None:
    t = table()
    history(t, LOOKUP, 3, [(4, 2)] * 10)
    history(t, MODEL, 0, [(4, 2)] * 10)
    assert choose([(3, SPAN)], 16, t, costs(model_step=0.04), MODEL, True).label == "lookup"


def test_the_choice_is_deterministic_and_within_the_depth() -> None:
    t = table()
    history(t, LOOKUP, 2, [(5, 3), (8, 8), (2, 0)])
    history(t, MODEL, 0, [(3, 2), (5, 5)])
    picks = {choose([(2, SPAN)], k, t, costs(), MODEL, True) for _ in range(3) for k in (5,)}
    assert len(picks) == 1
    (pick,) = picks
    assert len(pick.lookup) + pick.model <= 5


def test_acceptance_adapts_within_a_few_rounds_and_deep_positions_lean_on_shallow_ones() -> None:
    t = table()
    assert t.rate(LOOKUP, 3, 0) == lookup_prior(3) < lookup_prior(6)  # the prior: longer matches trusted more
    history(t, LOOKUP, 3, [(4, 4)] * 6)
    high = t.rate(LOOKUP, 3, 0)
    assert high > 0.9
    assert t.rate(LOOKUP, 3, 12) > 0.9  # never checked that deep: leans on the positions before
    history(t, LOOKUP, 3, [(4, 0)] * 4)
    assert t.rate(LOOKUP, 3, 0) < lookup_prior(3) < high
    assert t.rate(LOOKUP, 4, 0) == lookup_prior(4)  # another match length keeps its own figures
    rates = t.rates(MODEL, 0, 3)
    assert rates == [0.6, 0.6, 0.6]
