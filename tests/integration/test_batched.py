"""Several sequences in one target batch: each reply is the one it would be alone.

On the small random-weight test model (tests/models/llama.gguf): sequences
with different prompts, drafters and depths join at different rounds, one is
cancelled midway, and every reply is compared with plain greedy decoding of
its prompt alone and with the single-sequence engine (a difference only at a
float tie, support/identity.py). At temperature > 0 the exact rule holds per
sequence (a chi-square test of the first two tokens).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.llama.model import Model
from specchat.core.llama.multi_context import MultiContext, check_batchable
from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    Drafted,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    SamplerParams,
    SpecchatError,
    Verified,
)
from support.batch_runs import run_all
from support.identity import assert_same_or_tie, plain_greedy
from support.stats import assert_pairs_follow_the_target, batched_pairs

MODELS = Path(__file__).resolve().parent.parent / "models"
GREEDY = SamplerParams(temperature=0.0)


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    rt = Runtime(Model(MODELS / "llama.gguf"), None, n_ctx=512, n_threads=2)
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def batched(runtime: Runtime) -> Iterator[BatchedRuntime]:
    b = BatchedRuntime(runtime, 4, verify_budget=24)
    yield b
    b.close()


# Prompts with repeats in them, so that lookup finds matches and drafts.
PROMPTS = [
    [1, 5, 9, 22, 40, 7, 5, 9, 22, 40],
    [1, 3, 3, 8, 60, 61, 62, 3, 8, 60],
    [1, 90, 91, 92, 93, 94, 95, 90, 91],
    [1, 17, 18, 19, 20, 17, 18, 19, 20, 17, 18],
]


def lone_tokens(
    runtime: Runtime, prompt: list[int], params: GenerationParams, drafter: str, depth: int | None
) -> list[int]:
    """The single-sequence engine's reply to ``prompt``."""
    out: list[int] = []
    for event in runtime.stream(prompt, params, drafter=drafter, depth=DepthControl(depth), recall=False):
        if isinstance(event, Verified):
            out.extend(event.committed)
        elif isinstance(event, Finished):
            assert event.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS), event.message
    return out


def test_interleaved_sequences_each_match_their_lone_decode(runtime: Runtime, batched: BatchedRuntime) -> None:
    # (prompt, drafter, depth, round it joins at, tokens)
    plan = [
        (PROMPTS[0], "ngram", None, 0, 40),
        (PROMPTS[1], "none", None, 0, 30),
        (PROMPTS[2], "ngram", 3, 2, 40),
        (PROMPTS[3], "ngram", None, 5, 35),
    ]
    cancel_index, cancel_after = 2, 3  # the third sequence is cancelled after its third round
    keys: dict[int, int] = {}
    cancels = [CancelToken() for _ in plan]
    tokens: dict[int, list[int]] = {}
    texts: dict[int, str] = {}
    ended: dict[int, Finished] = {}
    drafted_rounds: Counter[int] = Counter()
    verified_rounds: Counter[int] = Counter()
    round_no = 0
    while len(ended) < len(plan):
        for i, (prompt, drafter, depth, joins, n) in enumerate(plan):
            if joins == round_no:
                params = GenerationParams(sampler=GREEDY, max_tokens=n)
                key, early = batched.admit(
                    prompt, params, drafter=drafter, depth=DepthControl(depth), cancel=cancels[i]
                )
                assert early is None
                keys[key] = i
                tokens[i], texts[i] = [], ""
        events: list[tuple[int, Event]] = batched.step()
        assert events or batched.active == 0
        for key, event in events:
            i = keys[key]
            assert i not in ended, "an event after the sequence's Finished"
            if isinstance(event, Verified):
                tokens[i].extend(event.committed)
                texts[i] += event.text
                verified_rounds[i] += 1
                if i == cancel_index and verified_rounds[i] == cancel_after:
                    cancels[i].cancel()
            elif isinstance(event, Drafted):
                drafted_rounds[i] += 1
            elif isinstance(event, Finished):
                ended[i] = event
        round_no += 1
        assert round_no < 200
    assert batched.active == 0
    assert ended[cancel_index].reason is FinishReason.CANCELLED
    assert verified_rounds[cancel_index] == cancel_after  # it left at the next round
    assert drafted_rounds[0] > 0 and drafted_rounds[3] > 0  # lookup drafted in the batch
    assert drafted_rounds[1] == 0  # plain decoding never drafts
    assert batched.engine.rounds < sum(len(t) for t in tokens.values())  # rounds were shared
    for i, (prompt, drafter, depth, _, n) in enumerate(plan):
        params = GenerationParams(sampler=GREEDY, max_tokens=n)
        plain = plain_greedy(runtime.target_context, prompt, n)
        got = tokens[i]
        if i == cancel_index:
            assert 0 < len(got) < n
            plain = plain[: len(got)]
        else:
            assert ended[i].reason is FinishReason.MAX_TOKENS
            assert ended[i].stats.generated == len(got) == n
        assert_same_or_tie(runtime.target_context, prompt, plain, got, label=f"sequence {i} against plain decoding")
        lone = lone_tokens(runtime, prompt, params, drafter, depth)[: len(got)]
        if lone == got:
            text = b"".join(runtime.target.piece(t) for t in got).decode("utf-8", errors="replace")
            assert texts[i] == text  # each sequence's text is its own tokens' text, nobody else's
        else:  # both tell the same story up to a tie
            assert_same_or_tie(runtime.target_context, prompt, plain, lone, label=f"sequence {i} alone")


def test_a_slot_keeps_its_prompt_for_the_next_turn(runtime: Runtime, batched: BatchedRuntime) -> None:
    params = GenerationParams(sampler=GREEDY, max_tokens=8)
    first = PROMPTS[3]
    key, _ = batched.admit(first, params, drafter="ngram")
    reply: list[int] = []
    while batched.active:
        for k, event in batched.step():
            assert k == key
            if isinstance(event, Verified):
                reply.extend(event.committed)
    turn = [*first, *reply, 44, 45]
    key, _ = batched.admit(turn, params, drafter="ngram")
    finished = None
    got: list[int] = []
    while batched.active:
        for _, event in batched.step():
            if isinstance(event, Verified):
                got.extend(event.committed)
            elif isinstance(event, Finished):
                finished = event
    assert finished is not None and finished.stats.reused_prompt_tokens >= len(first)
    assert_same_or_tie(runtime.target_context, turn, plain_greedy(runtime.target_context, turn, 8), got)


def test_bad_prompts_end_alone_and_others_go_on(runtime: Runtime, batched: BatchedRuntime) -> None:
    params = GenerationParams(sampler=GREEDY, max_tokens=6)
    good, _ = batched.admit(PROMPTS[0], params, drafter="ngram")
    _, empty = batched.admit([], params, drafter="ngram")
    assert empty is not None and empty.reason is FinishReason.ERROR and "empty" in empty.message
    _, long = batched.admit([1] * 600, params, drafter="none")
    assert long is not None and long.reason is FinishReason.ERROR and "context" in long.message
    with pytest.raises(SpecchatError, match="cannot join a batch"):
        batched.admit(PROMPTS[0], params, drafter="draft")
    got: list[int] = []
    while batched.active:
        for key, event in batched.step():
            assert key == good
            if isinstance(event, Verified):
                got.extend(event.committed)
    assert_same_or_tie(runtime.target_context, PROMPTS[0], plain_greedy(runtime.target_context, PROMPTS[0], 6), got)


def test_automatic_drafts_by_lookup_in_a_batch_without_a_draft_model(runtime: Runtime, batched: BatchedRuntime) -> None:
    assert batched.draft_model is None and batched.drafts_with("composite") == "ngram"
    key, early = batched.admit(PROMPTS[0], GenerationParams(sampler=GREEDY, max_tokens=6), drafter="composite")
    assert early is None and batched.engine._live[key].reply.drafter.kind == "ngram"
    got, finished = run_all(batched)[key]
    assert finished.stats.accepted > 0  # the prompt ends in a repeat: lookup's drafts are kept
    assert_same_or_tie(runtime.target_context, PROMPTS[0], plain_greedy(runtime.target_context, PROMPTS[0], 6), got)


def test_sampling_follows_the_target_per_sequence(runtime: Runtime, batched: BatchedRuntime) -> None:
    """The first two tokens of many seeded replies, four at a time in one batch, against the exact joint."""
    sampler = SamplerParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    prompt = PROMPTS[0]  # ends in a repeat: lookup drafts from the first round
    n = 200
    pairs, drafted = batched_pairs(batched, prompt, sampler, n, 4, "ngram")
    assert drafted > 0
    assert_pairs_follow_the_target(runtime.target_context, prompt, sampler, pairs, n)


def test_multi_context_rows_match_a_lone_context_and_slots_stay_apart(runtime: Runtime) -> None:
    ctx = MultiContext(runtime.target, n_seq=3, n_ctx=64, n_threads=2)
    try:
        a, b = PROMPTS[0], PROMPTS[1]
        sa, sb = ctx.acquire(a), ctx.acquire(b)
        ctx.extend_to(sa, a[:-1])
        ctx.extend_to(sb, b[:-1])
        rows = ctx.step([(sa, [a[-1], 11, 12]), (sb, [b[-1]])])
        lone = runtime.target_context
        lone.truncate(0)
        lone.extend_to(a[:-1])
        ref = lone.decode([a[-1], 11, 12], all_logits=True).copy()
        scale = float(np.abs(ref).max())
        assert np.abs(rows[0] - ref).max() < 1e-3 * scale
        ctx.truncate(sa, len(a))  # the drafts 11, 12 taken back in sa alone
        assert ctx.tokens[sa] == a and ctx.tokens[sb] == b
        again = ctx.step([(sa, [77])])[0]
        lone.truncate(len(a))
        assert np.abs(again - lone.decode([77], all_logits=True)).max() < 1e-3 * scale
        with pytest.raises(SpecchatError, match="do not fit"):
            ctx.step([(sb, [5] * (ctx.n_ctx - len(b) + 1))])
        assert ctx.tokens[sb] == b  # untouched by the refused batch
        with pytest.raises(SpecchatError, match="in use"):
            ctx.acquire(), ctx.acquire()
    finally:
        ctx.close()


def test_a_hybrid_target_is_refused_in_one_line_only_where_the_bindings_cannot_save_a_sequence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = Model(MODELS / "lfm2.gguf", vocab_only=True)
    try:
        check_batchable(model)  # these bindings save one sequence's state: its drafts are taken back per slot
        monkeypatch.delattr(llama_cpp, "llama_state_seq_get_data")  # bindings without it (older builds)
        with pytest.raises(SpecchatError, match=r"--parallel 1") as caught:
            check_batchable(model)
        assert "\n" not in str(caught.value) and "hybrid" in str(caught.value)
    finally:
        model.close()


def test_a_prompt_overwritten_in_its_slot_comes_back_from_the_prompt_cache(runtime: Runtime) -> None:
    two = BatchedRuntime(runtime, 2, verify_budget=8)
    try:
        params = GenerationParams(sampler=GREEDY, max_tokens=6)
        first = [1, *range(20, 60)]
        key, _ = two.admit(first, params, drafter="none")
        reply = run_all(two)[key][0]
        for other in ([1, *range(70, 100)], [1, *range(100, 125)]):  # both sequences read something else
            two.admit(other, params, drafter="none")
        run_all(two)
        turn = [*first, *reply, 44, 45]
        key, _ = two.admit(turn, params, drafter="ngram")
        got, finished = run_all(two)[key]
        assert finished.stats.reused_prompt_tokens >= len(first)  # loaded back, not read again
        assert_same_or_tie(runtime.target_context, turn, plain_greedy(runtime.target_context, turn, 6), got)
    finally:
        two.close()


def test_a_long_prompt_is_read_in_steps_while_the_others_go_on(demo_runtime: Runtime) -> None:
    big = demo_runtime  # the test models hold 256 positions; the demo target 2048 here
    batch = BatchedRuntime(big, 2, verify_budget=8)
    try:
        params = GenerationParams(sampler=GREEDY, max_tokens=30)
        first = big.prompt([{"role": "user", "content": "Count from one to twenty."}]).tokens
        short, _ = batch.admit(first, params, drafter="ngram")
        text = " ".join(
            f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7} marbles." for i in range(90)
        )
        long_prompt = big.prompt([{"role": "user", "content": text + " Which box holds the most?"}]).tokens
        assert len(long_prompt) > 4 * 256
        long, early = batch.admit(long_prompt, GenerationParams(sampler=GREEDY, max_tokens=8), drafter="ngram")
        assert early is None
        tokens: dict[int, list[int]] = {short: [], long: []}
        ended: dict[int, Finished] = {}
        rounds_before_long = 0
        while batch.active:
            for key, event in batch.step():
                if isinstance(event, Verified):
                    tokens[key].extend(event.committed)
                elif isinstance(event, Finished):
                    ended[key] = event
            if not tokens[long]:
                rounds_before_long += 1
        assert rounds_before_long >= 4  # over 1024 tokens to read, 256 a round: the short reply went on meanwhile
        assert ended[long].reason is FinishReason.MAX_TOKENS and ended[short].reason is not FinishReason.ERROR
        stats = ended[long].stats
        # A shared chat-template head may come from the prompt cache (earlier tests); the rest was read in steps.
        assert len(long_prompt) - stats.reused_prompt_tokens > 4 * 256
        assert stats.prompt_seconds > 0 and stats.generated == 8
        ctx = big.target_context
        assert_same_or_tie(ctx, long_prompt, plain_greedy(ctx, long_prompt, 8), tokens[long], label="long prompt")
        eog = big.target.eog_tokens
        assert_same_or_tie(ctx, first, plain_greedy(ctx, first, 30, GREEDY, eog), tokens[short], label="short")
    finally:
        batch.close()
