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
