"""The draft model shared by a batch: one draft context, a sequence each, every draft step one decode.

On the demo pair (the SmolLM2 target in F32, its Q4_1 quant as the draft):
sequences drafting with the model join at different rounds and each reply is
its lone decode's (a difference only at a float tie, support/identity.py);
the draft decodes really carried several sequences; a cancelled sequence's
draft slot is reused by the next without its old cache; at temperature > 0
the exact rule holds per sequence (a chi-square test of the first two tokens).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.batched import READ_STEP
from specchat.core.engine.batched_draft import SlotDrafter
from specchat.core.engine.depth import DepthControl
from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DraftSource, Event, Finished, FinishReason, GenerationParams, SamplerParams, Verified
from support.batch_runs import prompt_of, run_all
from support.identity import assert_same_or_tie, plain_greedy
from support.stats import assert_pairs_follow_the_target, batched_pairs

GREEDY = SamplerParams(temperature=0.0)
QUESTIONS = [
    "Count from one to ten.",
    "Name three rivers in Europe.",
    "What is the capital of France?",
    "Say hello in two languages.",
]


@pytest.fixture(scope="module")
def batched(demo_runtime: Runtime) -> Iterator[BatchedRuntime]:
    b = BatchedRuntime(demo_runtime, 3, verify_budget=24)
    yield b
    b.close()


def lone_tokens(runtime: Runtime, prompt: list[int], n: int, depth: int | None) -> list[int]:
    """The single-sequence engine's greedy reply to ``prompt``, drafting with the draft model."""
    out: list[int] = []
    params = GenerationParams(sampler=GREEDY, max_tokens=n)
    for event in runtime.stream(prompt, params, drafter="draft", depth=DepthControl(depth), recall=False):
        if isinstance(event, Verified):
            out.extend(event.committed)
        elif isinstance(event, Finished):
            assert event.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS), event.message
    return out


def check_alone(runtime: Runtime, prompt: list[int], got: list[int], n: int, depth: int | None, label: str) -> None:
    """``got`` is the lone decode's reply, or leaves plain greedy decoding only at a float tie."""
    lone = lone_tokens(runtime, prompt, n, depth)[: len(got)]
    if lone == got:
        return
    ctx, eog = runtime.target_context, runtime.target.eog_tokens
    plain = plain_greedy(ctx, prompt, n, GREEDY, eog)[: len(got)]
    assert_same_or_tie(ctx, prompt, plain, got, GREEDY, label=f"{label} batched")
    assert_same_or_tie(ctx, prompt, plain, lone, GREEDY, label=f"{label} alone")


def test_interleaved_sequences_drafting_with_the_model_each_match_their_lone_decode(
    demo_runtime: Runtime, batched: BatchedRuntime
) -> None:
    assert batched.draft_model is not None and batched.batchable("draft")
    model = batched.draft_model
    decodes_before, shared_before = model.decodes, model.shared_decodes
    # (question, round it joins at, tokens, depth): a fixed depth drafts whatever the machine's load says
    plan = [(QUESTIONS[0], 0, 32, 3), (QUESTIONS[1], 0, 24, None), (QUESTIONS[2], 3, 28, 4)]
    prompts = [prompt_of(demo_runtime, q) for q, _, _, _ in plan]
    keys: dict[int, int] = {}
    tokens: dict[int, list[int]] = {}
    ended: dict[int, Finished] = {}
    rounds_with_model_accepted_in_several = 0
    round_no = 0
    while len(ended) < len(plan):
        for i, (_, joins, n, depth) in enumerate(plan):
            if joins == round_no:
                params = GenerationParams(sampler=GREEDY, max_tokens=n)
                key, early = batched.admit(prompts[i], params, drafter="draft", depth=DepthControl(depth))
                assert early is None
                keys[key], tokens[i] = i, []
        events: list[tuple[int, Event]] = batched.step()
        accepted_from_model = set()
        for key, event in events:
            i = keys[key]
            if isinstance(event, Verified):
                tokens[i].extend(event.committed)
                if event.accepted and DraftSource.MODEL in event.sources[: len(event.accepted)]:
                    accepted_from_model.add(i)
            elif isinstance(event, Finished):
                ended[i] = event
        rounds_with_model_accepted_in_several += len(accepted_from_model) > 1
        round_no += 1
        assert round_no < 200
    assert batched.active == 0
    # The model drafted for several sequences in shared decodes, and its drafts were kept in several at once.
    assert model.shared_decodes - shared_before > 0 and model.widest >= 2
    assert model.decodes - decodes_before < sum(len(t) for t in tokens.values())
    assert rounds_with_model_accepted_in_several > 0
    assert batched.engine.rounds < sum(len(t) for t in tokens.values())  # rounds were shared
    for i, (question, _, n, depth) in enumerate(plan):
        assert ended[i].reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
        if depth is not None:
            assert ended[i].stats.accepted > 0  # the model's drafts were kept
        check_alone(demo_runtime, prompts[i], tokens[i], n, depth, question)


def test_a_cancelled_sequence_frees_its_draft_slot_for_the_next_without_its_cache(
    demo_runtime: Runtime, batched: BatchedRuntime
) -> None:
    assert batched.draft_contexts is not None
    drafts = batched.draft_contexts
    params = GenerationParams(sampler=GREEDY, max_tokens=24)
    cancel = CancelToken()
    long_replies = ["Count from one to ten.", "Write a long story about a cat.", "List the numbers up to thirty."]
    prompts = [prompt_of(demo_runtime, q) for q in long_replies]
    keys = [
        batched.admit(p, params, drafter="draft", depth=DepthControl(3), cancel=cancel if i == 1 else None)[0]
        for i, p in enumerate(prompts)
    ]
    slots = {key: seq.slot for key, seq in batched.engine._live.items()}
    assert len(set(slots.values())) == 3 and batched.room == 0
    for _ in range(3):  # the cancelled one has drafted and had drafts cut back in its slot by now
        batched.step()
    freed = slots[keys[1]]
    assert len(drafts.held(freed)) > len(prompts[1])
    cancel.cancel()
    ended = [key for key, event in batched.step() if isinstance(event, Finished)]
    assert ended == [keys[1]] and batched.room == 1  # the others go on
    late = prompt_of(demo_runtime, QUESTIONS[3])
    key, early = batched.admit(late, params, drafter="draft", depth=DepthControl(3))
    assert early is None
    seq = batched.engine._live[key]
    assert seq.slot == freed and isinstance(seq.reply.drafter, SlotDrafter) and seq.reply.drafter.slot == freed
    # The slot holds the new prompt alone: what the old sequence held past their shared head is gone from
    # llama.cpp's memory too.
    assert drafts.held(freed) == late[:-1] and drafts.positions(freed) == len(late) - 1
    tokens: list[int] = []
    while batched.active:
        for k, event in batched.step():
            if k == key and isinstance(event, Verified):
                tokens.extend(event.committed)
                held = drafts.held(freed)
                assert drafts.positions(freed) == len(held)  # the memory holds what the slot says, nothing more
                assert held[: len(late)] == late[: len(held)]  # the new prompt, nothing of the old sequence
                rejected = len(event.rejected)  # drafts past the first rejection: cut at the next catch-up
                assert held[: len(held) - rejected] == seq.reply.committed[: len(held) - rejected]
    check_alone(demo_runtime, late, tokens, 24, 3, QUESTIONS[3])


def test_sampling_follows_the_target_per_sequence_with_the_shared_draft(
    demo_runtime: Runtime, batched: BatchedRuntime
) -> None:
    """The first two tokens of many seeded replies, three at a time drafting with the model, against the exact
    joint."""
    sampler = SamplerParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    prompt = prompt_of(demo_runtime, "Write one word about the sea.")
    n = 150
    shared_before = batched.draft_model.shared_decodes if batched.draft_model else 0
    pairs, drafted = batched_pairs(batched, prompt, sampler, n, 3, "draft")
    assert drafted > 0
    assert batched.draft_model is not None and batched.draft_model.shared_decodes > shared_before
    assert_pairs_follow_the_target(demo_runtime.target_context, prompt, sampler, pairs, n)


def test_a_prompt_overwritten_in_its_draft_slot_comes_back_from_the_prompt_cache(demo_runtime: Runtime) -> None:
    two = BatchedRuntime(demo_runtime, 2, verify_budget=12)
    try:
        assert two.draft_contexts is not None
        params = GenerationParams(sampler=GREEDY, max_tokens=6)
        text = " ".join(f"Note {i}: the {['red', 'blue'][i % 2]} jar holds {i * 3} beads." for i in range(12))
        first = prompt_of(demo_runtime, text + " Which jar holds the most?")
        key, _ = two.admit(first, params, drafter="draft", depth=DepthControl(2))
        reply = run_all(two)[key][0]
        for other in ("Name a fruit.", "Name a colour."):  # both sequences read something else
            two.admit(prompt_of(demo_runtime, other), params, drafter="draft", depth=DepthControl(2))
        run_all(two)
        turn = [*first, *reply, *prompt_of(demo_runtime, "Thanks.")[1:]]
        loaded = demo_runtime.prompt_cache.stats.loaded
        key, early = two.admit(turn, params, drafter="draft", depth=DepthControl(2))
        assert early is None
        slot = two.engine._live[key].slot
        # Both the target's and the draft's states of the first prompt came back: neither read it again.
        assert demo_runtime.prompt_cache.stats.loaded == loaded + 2
        assert two.draft_contexts.held(slot) == turn[:-1]
        assert two.draft_contexts.positions(slot) == len(turn) - 1
        got = run_all(two)[key][0]
        check_alone(demo_runtime, turn, got, 6, 2, "next turn")
    finally:
        two.close()


def test_a_long_prompt_is_read_into_the_draft_context_in_steps_too(demo_runtime: Runtime) -> None:
    one = BatchedRuntime(demo_runtime, 1, verify_budget=8)
    try:
        assert one.draft_contexts is not None
        text = " ".join(f"Line {i}: the {['red', 'green', 'blue'][i % 3]} cup holds {i * 5} pens." for i in range(60))
        prompt = prompt_of(demo_runtime, text + " Which cup holds the most?")
        assert len(prompt) > 3 * READ_STEP
        key, early = one.admit(prompt, GenerationParams(sampler=GREEDY, max_tokens=8), drafter="draft")
        assert early is None
        slot = one.engine._live[key].slot
        reading = one.engine._live[key].reading
        assert reading is not None  # read in steps, not at once
        one.step()
        held = one.draft_contexts.held(slot)
        # The draft read the target's step: both hold the same part of the prompt, not yet all of it.
        assert held == one.contexts.tokens[slot] == prompt[: len(held)] and len(held) < len(prompt) - 1
        assert one.draft_contexts.positions(slot) == len(held)
        got: list[int] = []
        while one.active:
            for _, event in one.step():
                if isinstance(event, Verified):
                    got.extend(event.committed)
        check_alone(demo_runtime, prompt, got, 8, None, "long prompt")
    finally:
        one.close()
