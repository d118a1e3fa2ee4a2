"""Earlier prompts' caches kept in memory: a prompt seen before is loaded back, not read again.

Real contexts on the demo target and on a random-weight recurrent model; the logits after a loaded
state are compared bit for bit with those of the prompt read the first time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.core.engine.depth import DepthControl
from specchat.core.llama.context import Context
from specchat.core.llama.model import Model
from specchat.core.runtime.prompt_cache import PromptCache
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, Finished, GenerationParams, SamplerParams, Verified, common_prefix_len
from support.identity import assert_same_or_tie, plain_greedy

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parent.parent / "models"
REWRITE = [
    {
        "role": "user",
        "content": "Rewrite this more formally: "
        + "the cat sat on the mat and it was happy about it, really happy. " * 8,
    }
]
FACTS = [
    {
        "role": "user",
        "content": "List five facts about the moon, one a line, with numbers. " + "Please be careful and precise. " * 6,
    }
]
OTHER = [{"role": "user", "content": "Name the planets in order, then say which has the most moons. " * 4}]


@pytest.fixture(scope="module")
def target(demo_pair) -> Iterator[Context]:
    model = Model(demo_pair.target)
    ctx = Context(model, n_ctx=1024, n_threads=1)
    yield ctx
    ctx.close()
    model.close()


def prompt_of(runtime: Runtime, messages: list[dict[str, str]]) -> list[int]:
    return runtime.prompt(messages).tokens


def logits_after(ctx: Context, prompt: list[int]) -> np.ndarray:
    """The logits after ``prompt``: what the context lacks of all but its last token, then that token alone."""
    ctx.extend_to(prompt[:-1])
    row, _ = ctx.sync(prompt)
    return np.array(row)  # a copy: the row is the context's buffer


def test_a_dropped_prompt_is_kept_and_loaded_back_bit_for_bit(target: Context, demo_runtime: Runtime) -> None:
    a, b = prompt_of(demo_runtime, REWRITE), prompt_of(demo_runtime, FACTS)
    cache = PromptCache()
    target.truncate(0)
    first = logits_after(target, a)
    assert cache.recall("t", target, b) == common_prefix_len(a, b) < len(a) // 4  # the template's opening
    assert [len(s.tokens) for s in cache.states("t")] == [len(a)]  # a's state, kept before b dropped it
    logits_after(target, b)
    held = cache.recall("t", target, a)
    assert held == len(a) and list(target.tokens) == a and cache.stats.loaded == 1
    assert [len(s.tokens) for s in cache.states("t")] == [len(b), len(a)]  # b kept, a most recently used
    row, reused = target.sync(a)
    assert reused == len(a) - 1  # only the last token is decoded again, for its logits
    assert np.array_equal(row, first)
    # The same prompt again with the context holding it: nothing to keep, nothing to load.
    assert cache.recall("t", target, a) == len(a) and cache.stats.kept == 2 and cache.stats.loaded == 1


def test_the_budget_drops_the_least_recently_used_state(target: Context, demo_runtime: Runtime) -> None:
    prompts = [prompt_of(demo_runtime, m) for m in (REWRITE, FACTS, OTHER)]
    target.truncate(0)
    logits_after(target, prompts[0])
    one = target.save_state()
    assert one is not None
    assert len(prompts[0]) > max(len(prompts[1]), len(prompts[2]))
    cache = PromptCache(budget=one.nbytes + 1)  # room for the largest state alone, or for one other
    for prompt in (*prompts, prompts[0]):
        cache.recall("t", target, prompt)
        logits_after(target, prompt)
    # The third prompt's arrival kept the second and dropped the first; the first's, the third and dropped the
    # second: the first prompt is read again.
    assert cache.stats.loaded == 0 and cache.stats.kept == 3 and cache.stats.dropped == 2
    assert [s.tokens[: len(prompts[2])] for s in cache.states("t")] == [tuple(prompts[2])]
    off = PromptCache(budget=0)
    off.recall("t", target, prompts[1])
    assert off.states("t") == [] and off.stats.kept == 0


def test_a_state_of_another_model_is_refused_and_leaves_the_context_empty(target: Context) -> None:
    other_model = Model(MODELS / "llama.gguf")
    other = Context(other_model, n_ctx=256, n_threads=1)
    try:
        other.decode([1, 2, 3, 4, 5])
        foreign = other.save_state()
        assert foreign is not None
        target.truncate(0)
        target.decode([1, 2, 3])
        assert target.load_state(foreign) is False
        assert target.tokens == []
        target.decode([1, 2, 3])  # the context still decodes
    finally:
        other.close()
        other_model.close()


def test_a_recurrent_state_is_loaded_only_where_the_prompt_extends_it() -> None:
    model = Model(MODELS / "mamba2.gguf")
    ctx = Context(model, n_ctx=256, n_threads=1)
    try:
        base = [(7 * i) % 100 + 10 for i in range(40)]
        kept = base + [3] * 30
        ctx.extend_to(kept)
        cache = PromptCache()
        cache.recall("t", ctx, [5] * 40)  # drops everything: kept
        ctx.extend_to([5] * 40)
        assert [s.tokens for s in cache.states("t")] == [tuple(kept)]
        # It shares 40 + 20 tokens with this prompt but would need a cut: a recurrent state cannot be cut.
        assert cache.recall("t", ctx, base + [3] * 20 + [4] * 10) == 0 and cache.stats.loaded == 0
        ctx.extend_to([5] * 40)
        extended = kept + [9] * 5
        assert cache.recall("t", ctx, extended) == len(kept) and cache.stats.loaded == 1
        row, reused = ctx.sync(extended)
        fresh_model = Model(MODELS / "mamba2.gguf")
        fresh = Context(fresh_model, n_ctx=256, n_threads=1)
        try:
            expected, _ = fresh.sync(extended)
            np.testing.assert_allclose(row, expected, rtol=0, atol=1e-4)  # the same state, read another way
        finally:
            fresh.close()
            fresh_model.close()
    finally:
        ctx.close()
        model.close()


def reply_tokens(runtime: Runtime, messages: list[dict[str, str]]) -> tuple[list[int], Finished]:
    tokens: list[int] = []
    finished = None
    for event in runtime.reply(
        messages, GenerationParams(max_tokens=24), drafter=DrafterKind.DRAFT_MODEL, depth=DepthControl(4)
    ):
        if isinstance(event, Verified):
            tokens += event.committed
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None
    return tokens, finished


def test_interleaved_conversations_each_find_their_prompt_kept(demo_runtime: Runtime) -> None:
    demo_runtime.empty_caches()
    first, before = reply_tokens(demo_runtime, REWRITE)
    _, between = reply_tokens(demo_runtime, FACTS)
    again, after = reply_tokens(demo_runtime, REWRITE)
    shared = common_prefix_len(prompt_of(demo_runtime, REWRITE), prompt_of(demo_runtime, FACTS))
    assert before.stats.reused_prompt_tokens == 0 and between.stats.reused_prompt_tokens == shared
    assert after.stats.reused_prompt_tokens >= after.stats.prompt_tokens - 1  # loaded back, not read
    cache = demo_runtime.prompt_cache
    facts = tuple(prompt_of(demo_runtime, FACTS)[:-1])
    # FACTS's prompt and reply, kept when the last request dropped them, for the target and the draft model
    assert any(s.tokens[: len(facts)] == facts for s in cache.states("target"))
    assert any(s.tokens[: len(facts)] == facts for s in cache.states("draft"))
    if again != first:  # the same tokens, or parted only at a float tie
        prompt = prompt_of(demo_runtime, REWRITE)
        plain = plain_greedy(demo_runtime.target_context, prompt, 24, SamplerParams(), demo_runtime.target.eog_tokens)
        assert_same_or_tie(demo_runtime.target_context, prompt, plain, first, label="read")
        assert_same_or_tie(demo_runtime.target_context, prompt, plain, again, label="loaded back")


def test_no_state_is_kept_where_mtp_heads_follow_the_target() -> None:
    runtime = Runtime.load(MODELS / "qwen35-mtp.gguf", n_ctx=256, n_threads=1)
    try:
        assert runtime.has_mtp
        params = GenerationParams(max_tokens=6)
        for text in ("Tell me about the sea. " * 6, "Count to ten, please. " * 6):
            list(runtime.reply([{"role": "user", "content": text}], params, drafter=DrafterKind.MTP))
        assert runtime.prompt_cache.stats.kept == 0 and runtime.prompt_cache.nbytes == 0
    finally:
        runtime.close()
