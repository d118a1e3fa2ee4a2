"""Which part drafts an automatic sequence's round in a batch (batched_auto.choose_arm), how each part's
acceptance is counted, and when the batch lets the model draft at all (batched_auto.ModelGate)."""

from __future__ import annotations

from specchat.core.engine.batched_auto import RETRY_EVERY, STALE_ROUNDS, Arm, ArmTally, ModelGate, choose_arm

EVEN = {Arm.LOOKUP: 0.5, Arm.MODEL: 0.5}


def test_a_part_with_nothing_to_draft_leaves_it_to_the_other() -> None:
    tally = ArmTally()
    assert choose_arm(1, 0, 0, tally, EVEN) is None
    assert choose_arm(1, 0, 5, tally, EVEN) is Arm.MODEL
    assert choose_arm(1, 3, 0, tally, EVEN) is Arm.LOOKUP


def test_lookup_drafts_while_it_is_kept_at_least_as_often_and_the_model_once_it_is_not() -> None:
    tally = ArmTally()
    assert choose_arm(1, 3, 5, tally, EVEN) is Arm.LOOKUP  # as sure, and it costs nothing
    tally.observe(Arm.LOOKUP, 1, 3, 0)  # all three rejected: one judged, none kept
    tally.observe(Arm.LOOKUP, 2, 2, 0)
    tally.observe(Arm.MODEL, 3, 4, 3)
    assert tally.counts[Arm.LOOKUP].reached == 2 and tally.counts[Arm.MODEL].reached == 4
    assert tally.acceptance(Arm.LOOKUP, 0.5) < tally.acceptance(Arm.MODEL, 0.5)
    assert choose_arm(4, 3, 5, tally, EVEN) is Arm.MODEL
    # The priors are the parts' over the batch's earlier sequences, and weigh as a few drafts.
    assert choose_arm(1, 3, 5, ArmTally(), {Arm.LOOKUP: 0.2, Arm.MODEL: 0.8}) is Arm.MODEL


def test_a_part_left_out_for_a_while_runs_once_again() -> None:
    tally = ArmTally()
    for r in range(1, RETRY_EVERY + 1):
        tally.observe(Arm.MODEL, r, 4, 4)  # the model keeps winning
    tally.observe(Arm.LOOKUP, 1, 2, 0)
    assert choose_arm(RETRY_EVERY, 2, 5, tally, EVEN) is Arm.MODEL
    assert choose_arm(RETRY_EVERY + 1, 2, 5, tally, EVEN) is Arm.LOOKUP  # not run since round 1
    tally.observe(Arm.LOOKUP, RETRY_EVERY + 1, 2, 0)
    assert choose_arm(RETRY_EVERY + 2, 2, 5, tally, EVEN) is Arm.MODEL
    # A round that drafted nothing is no try.
    tally.observe(Arm.MODEL, 3 * RETRY_EVERY, 0, 0)
    assert tally.last[Arm.MODEL] == RETRY_EVERY


def test_the_gate_times_rounds_without_the_model_first_then_with_it_then_keeps_the_faster() -> None:
    gate = ModelGate()
    assert not gate.allows(2, 0)  # nothing timed: a round without the model first
    gate.observe(2, False, 4, 0.1, 0)  # 40 tok/s
    assert gate.allows(2, 1)  # then one with it
    gate.observe(2, True, 9, 0.3, 1)  # 30 tok/s: slower
    assert not gate.allows(2, 2)
    assert not gate.allows(3, 2)  # another number of live sequences is timed on its own
    for r in range(2, 8):
        gate.observe(2, True, 12, 0.2, r)  # 60 tok/s lately
    assert gate.allows(2, 8)


def test_a_stale_side_is_timed_again_and_its_old_rate_forgotten() -> None:
    gate = ModelGate()
    gate.observe(1, False, 4, 0.1, 0)  # 40 tok/s
    gate.observe(1, True, 8, 0.1, 1)  # 80 tok/s
    assert gate.allows(1, 2)
    # Rounds without the model not timed for a while: one is run again before the model drafts on.
    assert not gate.allows(1, 1 + STALE_ROUNDS)
    gate.observe(1, False, 10, 0.1, 1 + STALE_ROUNDS)  # 100 tok/s, replacing the stale 40 outright
    gate.observe(1, True, 8, 0.1, 1 + STALE_ROUNDS)  # the model's 80, still averaged
    assert not gate.allows(1, 2 + STALE_ROUNDS)
    gate.observe(1, True, 1, 0.0, 3 + STALE_ROUNDS)  # a round of no measurable time counts for nothing
    assert not gate.allows(1, 3 + STALE_ROUNDS)
