"""The automatic drafter inside a batch: each round lookup or the shared draft model, per sequence.

On the demo pair: sequences that copy text and sequences that write freely draft automatically in one batch;
both parts draft, each sequence mostly with the part whose drafts it keeps more often, and every reply is plain
greedy decoding's (a difference only at a float tie, support/identity.py). Where the batch cannot afford the model's
steps, an automatic sequence drafts its lookup proposal instead of nothing. At temperature > 0 the exact rule
holds per sequence (a chi-square test of the first two tokens).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specchat.core.engine import batched as batched_engine
from specchat.core.engine.batched_auto import STALE_ROUNDS, Arm, AutoSlotDrafter
from specchat.core.engine.depth import DepthControl
from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    DrafterKind,
    DraftSource,
    Finished,
    FinishReason,
    GenerationParams,
    SamplerParams,
    Verified,
)
from support.batch_runs import prompt_of, run_all
from support.identity import assert_same_or_tie, plain_greedy
from support.stats import assert_pairs_follow_the_target, batched_pairs

GREEDY = SamplerParams(temperature=0.0)
AUTO = DrafterKind.COMPOSITE.value
LINE = "the red fox runs past the old mill and over the stone bridge to the river"
COPY = f"Repeat this line three times, exactly: {LINE}."
FREE = ["Name three rivers in Europe.", "Count from one to ten."]


@pytest.fixture(scope="module")
def batched(demo_runtime: Runtime) -> Iterator[BatchedRuntime]:
    b = BatchedRuntime(demo_runtime, 3, verify_budget=24)
    yield b
    b.close()


def check_plain(runtime: Runtime, prompt: list[int], got: list[int], label: str) -> None:
    ctx, eog = runtime.target_context, runtime.target.eog_tokens
    plain = plain_greedy(ctx, prompt, len(got), GREEDY, eog)
    assert_same_or_tie(ctx, prompt, plain, got, GREEDY, label=label)


def drafted_by(finished: Finished, source: DraftSource) -> tuple[int, int]:
    drafted, accepted = finished.stats.by_source.get(source.value, [0, 0])
    return drafted, accepted


def test_each_sequence_drafts_with_the_part_kept_more_often_and_each_reply_is_plain_decodings(
    demo_runtime: Runtime, batched: BatchedRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert batched.batchable(AUTO) and batched.drafts_with(AUTO) == AUTO
    monkeypatch.setattr(batched.engine.gate, "allows", lambda live, round_number: True)  # the model may draft
    questions = [COPY, *FREE]
    prompts = [prompt_of(demo_runtime, q) for q in questions]
    keys = {}
    for i, prompt in enumerate(prompts):
        params = GenerationParams(sampler=GREEDY, max_tokens=48)
        # A fixed depth: every round drafts, whatever the machine's load says a row costs.
        key, early = batched.admit(prompt, params, drafter=AUTO, depth=DepthControl(3))
        assert early is None and isinstance(batched.engine._live[key].reply.drafter, AutoSlotDrafter)
        keys[key] = i
    results = run_all(batched)
    ends = {keys[key]: end for key, (_, end) in results.items()}
    # Both parts drafted over the batch, and the model's drafts were kept.
    assert sum(drafted_by(end, DraftSource.LOOKUP)[0] for end in ends.values()) > 0
    assert sum(drafted_by(end, DraftSource.MODEL)[1] for end in ends.values()) > 0
    for i, end in ends.items():
        lookup, model = drafted_by(end, DraftSource.LOOKUP), drafted_by(end, DraftSource.MODEL)
        if lookup[1] * max(model[0], 1) < model[1] * max(lookup[0], 1):  # the model's drafts kept more often
            assert model[0] > lookup[0], (questions[i], end.stats.by_source)
    for key, (tokens, end) in results.items():
        i = keys[key]
        assert end.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS), end.message
        check_plain(demo_runtime, prompts[i], tokens, questions[i])


def test_where_the_batch_cannot_afford_the_models_steps_the_lookup_proposal_drafts(
    demo_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    two = BatchedRuntime(demo_runtime, 2, verify_budget=16)
    try:
        assert two.draft_model is not None
        two.draft_model._per_position.extend([30.0] * 3)  # as if a draft position took 30 s: never worth it
        monkeypatch.setattr(two.engine, "_round_costs", lambda: lambda rows: 1.0)  # a verified row costs nothing
        monkeypatch.setattr(two.engine.gate, "allows", lambda live, round_number: True)  # its realised rate aside
        monkeypatch.setattr(batched_engine, "EXPLORE_EVERY", 10_000)  # only the first round sizes by budget alone
        two.engine.rounds = 1
        prompt = prompt_of(demo_runtime, COPY)
        key, early = two.admit(prompt, GenerationParams(sampler=GREEDY, max_tokens=40), drafter=AUTO)
        assert early is None
        drafter = two.engine._live[key].reply.drafter
        slot = two.engine._live[key].slot
        assert isinstance(drafter, AutoSlotDrafter) and two.draft_contexts is not None
        held = list(two.draft_contexts.held(slot))  # what an earlier sequence or the prompt cache left there
        tokens, end = run_all(two)[key]
        assert two.draft_contexts.held(slot) == held  # the model read nothing of this reply
        assert drafted_by(end, DraftSource.MODEL) == (0, 0)  # the model was asked (each retry) but never allotted
        assert drafted_by(end, DraftSource.LOOKUP)[1] >= 3
        assert drafter.tally.counts[Arm.LOOKUP].accepted == drafted_by(end, DraftSource.LOOKUP)[1]
        check_plain(demo_runtime, prompt, tokens, "lookup instead")
    finally:
        two.close()


def test_the_model_drafts_only_after_rounds_without_it_were_timed_and_while_it_realises_more(
    demo_runtime: Runtime,
) -> None:
    one = BatchedRuntime(demo_runtime, 1, verify_budget=8)
    try:
        prompt = prompt_of(demo_runtime, FREE[0])
        params = GenerationParams(sampler=GREEDY, max_tokens=40)
        key, _ = one.admit(prompt, params, drafter=AUTO, depth=DepthControl(3))
        first = one.step()
        assert not any(DraftSource.MODEL in getattr(event, "sources", ()) for _, event in first)
        tokens, end = run_all(one)[key]
        tokens = [t for _, event in first if isinstance(event, Verified) for t in event.committed] + tokens
        # Both kinds of round were timed at one live sequence: the model was tried once rounds without it were.
        assert set(one.engine.gate._rates) == {(1, False), (1, True)}
        assert drafted_by(end, DraftSource.MODEL)[0] > 0
        check_plain(demo_runtime, prompt, tokens, "gated")
        # Rounds with the model timed slower than rounds without it: the next reply drafts without it.
        gate = one.engine.gate
        now = one.engine.rounds
        gate.observe(1, False, 100, 1.0, now)
        gate.observe(1, True, 1, 1.0, now)
        gate._rates[(1, True)].tokens_per_second = 1.0
        assert not gate.allows(1, now)
        key, _ = one.admit(prompt, params, drafter=AUTO, depth=DepthControl(3))
        tokens = []
        while one.active:
            events = one.step()
            for _, event in events:
                if isinstance(event, Verified):
                    tokens += event.committed
                    if one.engine.rounds <= now + STALE_ROUNDS:  # until the model's slow rate is stale
                        assert DraftSource.MODEL not in event.sources, one.engine.rounds - now
        check_plain(demo_runtime, prompt, tokens, "gated shut")
    finally:
        one.close()


def test_sampling_follows_the_target_per_sequence_drafting_automatically(
    demo_runtime: Runtime, batched: BatchedRuntime
) -> None:
    """The first two tokens of many seeded replies, three at a time drafting automatically, against the exact
    joint."""
    sampler = SamplerParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    prompt = prompt_of(demo_runtime, "Write one word about the sea.")
    n = 150
    pairs, drafted = batched_pairs(batched, prompt, sampler, n, 3, AUTO)
    assert drafted > 0
    assert_pairs_follow_the_target(demo_runtime.target_context, prompt, sampler, pairs, n)
