"""Sharing one verify budget among the sequences of a batch (specchat.core.engine.batched.allot)."""

from __future__ import annotations

from specchat.core.engine.batched import MIN_GAIN, allot


def test_the_budget_is_never_exceeded_and_every_sequence_keeps_its_row() -> None:
    for n in range(1, 9):
        depths = allot([16] * n, [0.95] * n, budget=24)
        assert n + sum(depths) <= 24
        assert len(depths) == n


def test_likelier_sequences_get_the_longer_drafts() -> None:
    depths = allot([16, 16, 16], [0.9, 0.5, 0.1], budget=12)
    assert depths[0] > depths[1] > depths[2]
    assert sum(depths) == 9


def test_caps_and_the_least_gain_are_respected() -> None:
    assert allot([2, 0, 16], [0.99, 0.99, 0.99], budget=40)[:2] == [2, 0]
    lone = allot([16], [0.5], budget=40)[0]
    assert 0.5**lone >= MIN_GAIN > 0.5 ** (lone + 1)  # drafts stop where they stop paying
    assert allot([16], [0.01], budget=40) == [0]


def test_a_full_batch_drafts_nothing() -> None:
    assert allot([16] * 8, [0.9] * 8, budget=8) == [0] * 8


def test_when_every_row_costs_a_full_pass_no_draft_pays() -> None:
    assert allot([16] * 4, [0.9] * 4, budget=40, cost=float) == [0] * 4


def test_nearly_free_rows_take_every_draft_worth_a_row() -> None:
    free = allot([16, 16], [0.9, 0.5], budget=40, cost=lambda rows: 1.0 + 1e-4 * rows)
    assert free == allot([16, 16], [0.9, 0.5], budget=40)


def test_a_costly_row_goes_only_to_the_likely_drafts() -> None:
    depths = allot([16, 16], [0.95, 0.3], budget=40, cost=lambda rows: 1.0 + 0.2 * rows)
    assert depths[0] > 0 and depths[1] == 0

    # The expected rate it chose beats one draft more or one fewer.
    def rate(d0: int) -> float:
        return (2 + sum(0.95**j for j in range(1, d0 + 1))) / (1.0 + 0.2 * (2 + d0))

    assert rate(depths[0]) >= max(rate(depths[0] - 1), rate(depths[0] + 1))


def test_a_depth_the_request_fixed_is_kept_whatever_the_cost() -> None:
    depths = allot([3, 16], [0.1, 0.1], budget=40, cost=float, fixed=[True, False])
    assert depths == [3, 0]
    assert allot([30, 30], [0.9, 0.9], budget=12, fixed=[True, True]) == [10, 0]  # the budget still holds


def test_costly_draft_model_steps_stop_model_drafting_while_cheap_lookup_drafts_stay() -> None:
    # Sequence 0 drafts with the shared draft model (each position one more draft step for the round), sequence 1
    # with lookup (free to draft). Verify rows are nearly free; only the model's steps cost.
    cheap_rows = lambda rows: 1.0 + 1e-4 * rows  # noqa: E731
    free = allot([8, 8], [0.9, 0.9], budget=40, cost=cheap_rows, stepped=[True, False], step_cost=0.0)
    assert free[0] > 0 and free[1] > 0
    costly = allot([8, 8], [0.9, 0.9], budget=40, cost=cheap_rows, stepped=[True, False], step_cost=5.0)
    assert costly[0] == 0 and costly[1] == free[1]


def test_a_draft_step_is_paid_once_for_all_the_sequences_taking_it() -> None:
    # Two model sequences share each step: the second one's drafts cost only their verify rows, so when one
    # step pays for one sequence's draft, the same depth pays for both.
    rows = lambda r: 1.0 + 0.01 * r  # noqa: E731
    lone = allot([4, 0], [0.9, 0.9], budget=40, cost=rows, stepped=[True, True], step_cost=0.3)
    both = allot([4, 4], [0.9, 0.9], budget=40, cost=rows, stepped=[True, True], step_cost=0.3)
    assert lone[0] > 0 and both[0] >= lone[0] and both[1] >= lone[0]
