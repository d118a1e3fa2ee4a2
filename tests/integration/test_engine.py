"""The speculative engine on the real demo pair (F32 target, Q4_1 draft)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    Drafted,
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    SamplerParams,
    SpecchatError,
    Verified,
)
from support.events import finished
from support.stats import assert_pairs_follow_the_target

GREEDY = GenerationParams(max_tokens=40)


def reference_greedy(runtime: Runtime, messages: list[dict[str, str]], n: int) -> list[int]:
    """The target alone, one token per decode, straight on the llama.cpp context."""
    prompt = runtime.prompt(messages).tokens
    ctx = runtime.target_context
    ctx.truncate(0)
    row = ctx.decode(prompt)[0]
    out: list[int] = []
    while len(out) < n:
        token = int(np.argmax(row))
        out.append(token)
        if token in runtime.target.eog_tokens:
            break
        row = ctx.decode([token])[0]
    return out


def run(session: Conversation, text: str | None, params: GenerationParams, **kwargs: object) -> list[Event]:
    return list(session.reply(text, params, **kwargs))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def references(demo_runtime: Runtime, prompts) -> dict[str, list[int]]:
    return {pid: reference_greedy(demo_runtime, msgs, GREEDY.max_tokens) for pid, msgs in prompts}


@pytest.mark.parametrize(
    ("drafter", "depth"),
    [
        (DrafterKind.DRAFT_MODEL, 1),
        (DrafterKind.DRAFT_MODEL, 3),
        (DrafterKind.DRAFT_MODEL, 8),
        (DrafterKind.DRAFT_MODEL, None),
        (DrafterKind.NGRAM, 4),
        (DrafterKind.NONE, 0),
    ],
    ids=["draft-1", "draft-3", "draft-8", "draft-auto", "ngram-4", "plain"],
)
def test_greedy_output_is_token_identical_to_the_target_alone(
    demo_runtime, prompts, references, drafter, depth
) -> None:
    drafted = 0
    for pid, messages in prompts:
        session = Conversation(demo_runtime, messages[:-1])
        events = run(session, messages[-1]["content"], GREEDY, drafter=drafter, depth=DepthControl(depth))
        assert session.last_tokens == references[pid], pid
        drafted += finished(events).stats.drafted
    if drafter is not DrafterKind.NONE:
        assert drafted > 0  # speculation really happened


def test_greedy_with_the_apps_repeat_penalty_is_identical_to_plain_decoding(demo_runtime, prompts, references) -> None:
    """The window's default sampler (greedy, repeat penalty 1.1) keeps speculation exact."""
    params = GenerationParams(sampler=SamplerParams(repeat_penalty=1.1), max_tokens=40)
    differs = 0
    for pid, messages in prompts:
        outputs = []
        for drafter, depth in ((DrafterKind.NONE, 0), (DrafterKind.DRAFT_MODEL, None)):
            session = Conversation(demo_runtime, messages[:-1])
            run(session, messages[-1]["content"], params, drafter=drafter, depth=DepthControl(depth))
            outputs.append(session.last_tokens)
        assert outputs[0] == outputs[1], pid
        differs += outputs[0] != references[pid]
    assert differs > 0  # the penalty really changed some replies


def test_events_are_consistent(demo_runtime) -> None:
    session = Conversation(demo_runtime)
    events = run(session, "List three colours.", GenerationParams(max_tokens=48), depth=DepthControl(4))
    assert isinstance(events[-1], Finished) and sum(isinstance(e, Finished) for e in events) == 1
    pending: Drafted | None = None
    text = []
    for e in events[:-1]:
        if isinstance(e, Drafted):
            assert pending is None
            pending = e
            assert len(e.tokens) == len(e.pieces) == len(e.draft_probs) and len(e.tokens) <= 4
        else:
            assert isinstance(e, Verified)
            if pending is not None:
                assert e.round == pending.round
                assert e.accepted + e.rejected == pending.tokens
                assert e.rejected_pieces == pending.pieces[len(e.accepted) :]
                assert all(0.0 <= p <= 1.0 for p in e.target_probs + e.draft_probs)
            pending = None
            text.append(e.text)
    assert "".join(text) == session.messages[-1]["content"]
    stats = finished(events).stats
    assert stats.accepted == sum(len(e.accepted) for e in events if isinstance(e, Verified))
    assert 0.5 < stats.acceptance_rate <= 1.0  # same model at two precisions agrees most of the time


def test_sampling_first_tokens_follow_the_target_distribution(demo_runtime) -> None:
    """Chi-square test of the first two tokens against the target's exact probabilities."""
    sampler = SamplerParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0)
    messages = [{"role": "user", "content": "Name a fruit."}]
    prompt = demo_runtime.prompt(messages).tokens
    ctx = demo_runtime.target_context
    n = 300
    pairs: Counter[tuple[int, int]] = Counter()
    for seed in range(n):
        session = Conversation(demo_runtime, [])
        run(
            session,
            messages[0]["content"],
            GenerationParams(sampler=sampler, max_tokens=2, seed=seed),
            depth=DepthControl(3),
        )
        pairs[tuple(session.last_tokens[:2])] += 1  # type: ignore[index]
    assert_pairs_follow_the_target(ctx, prompt, sampler, pairs, n)


def test_seeded_sampling_is_reproducible_and_seeds_differ(demo_runtime) -> None:
    params = GenerationParams(sampler=SamplerParams(temperature=0.9), max_tokens=24, seed=42)
    runs = []
    for _ in range(2):
        session = Conversation(demo_runtime)
        run(session, "Tell me a fun fact.", params, depth=DepthControl(4))
        runs.append(session.last_tokens)
    assert runs[0] == runs[1]
    others = []
    for seed in (1, 2, 3):
        session = Conversation(demo_runtime)
        run(
            session,
            "Tell me a fun fact.",
            GenerationParams(sampler=params.sampler, max_tokens=24, seed=seed),
            depth=DepthControl(4),
        )
        others.append(session.last_tokens)
    assert any(o != runs[0] for o in others)


def test_multi_turn_reuses_the_kv_cache_and_matches_a_fresh_session(demo_runtime) -> None:
    params = GenerationParams(max_tokens=24)
    session = Conversation(demo_runtime)
    run(session, "What is the capital of France?", params, depth=DepthControl(4))
    second = run(session, "And of Italy?", params, depth=DepthControl(4))
    assert finished(second).stats.reused_prompt_tokens > finished(second).stats.prompt_tokens // 2

    fresh = Conversation(demo_runtime, session.messages[:-2])
    demo_runtime.empty_caches()
    again = run(fresh, "And of Italy?", params, depth=DepthControl(4))
    assert finished(again).stats.reused_prompt_tokens == 0
    assert fresh.messages[-1] == session.messages[-1]


def test_cancel_stops_within_a_round_and_leaves_the_session_consistent(demo_runtime) -> None:
    params = GenerationParams(max_tokens=200)
    session = Conversation(demo_runtime)
    cancel = CancelToken()
    events = []
    for event in session.reply("Write a long story about a dragon.", params, depth=DepthControl(4), cancel=cancel):
        events.append(event)
        if isinstance(event, Verified) and event.round == 1:
            cancel.cancel()
    assert finished(events).reason is FinishReason.CANCELLED
    assert sum(isinstance(e, Verified) for e in events) == 2  # nothing verified after the cancel
    assert session.messages[-1]["role"] == "assistant"

    follow_up = GenerationParams(max_tokens=20)
    run(session, "Now say goodbye.", follow_up, depth=DepthControl(4))
    fresh = Conversation(demo_runtime, session.messages[:-2])
    demo_runtime.empty_caches()
    run(fresh, "Now say goodbye.", follow_up, depth=DepthControl(4))
    assert fresh.last_tokens == session.last_tokens


def test_depth_change_takes_effect_on_later_rounds(demo_runtime) -> None:
    control = DepthControl(2)
    depths = []
    session = Conversation(demo_runtime)
    for event in session.reply("Count from one to thirty in words.", GenerationParams(max_tokens=60), depth=control):
        if isinstance(event, Verified):
            depths.append(event.depth)
            if event.round == 2:
                control.set(6)
    assert depths[:3] == [2, 2, 2]
    assert 6 in depths[3:] and all(d <= 6 for d in depths[3:])


def test_stop_string_ends_the_reply_before_it(demo_runtime) -> None:
    session = Conversation(demo_runtime)
    plain = Conversation(demo_runtime)
    run(plain, "Count from 1 to 10, separated by commas.", GenerationParams(max_tokens=40))
    full = plain.messages[-1]["content"]
    assert "5" in full
    events = run(
        session,
        "Count from 1 to 10, separated by commas.",
        GenerationParams(max_tokens=40, stop_strings=("5",)),
        depth=DepthControl(4),
    )
    assert finished(events).reason is FinishReason.STOP_STRING
    assert session.messages[-1]["content"] == full[: full.index("5")]


def test_draft_p_min_ends_drafts_early(demo_runtime) -> None:
    def drafted(p_min: float) -> tuple[int, int]:
        session = Conversation(demo_runtime)
        events = run(
            session,
            "Explain photosynthesis.",
            GenerationParams(max_tokens=48, draft_p_min=p_min),
            depth=DepthControl(8),
        )
        rounds = [e for e in events if isinstance(e, Drafted)]
        return sum(len(e.tokens) for e in rounds), len(rounds)

    full, rounds_full = drafted(0.0)
    short, rounds_short = drafted(0.9)
    assert full == 8 * rounds_full or full / rounds_full > 7
    assert short / max(rounds_short, 1) < full / rounds_full


def test_context_full_finishes_with_a_reason_not_a_crash(demo_pair) -> None:
    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=256)  # llama.cpp's smallest
    try:
        session = Conversation(runtime)
        events = run(session, "Tell me a story.", GenerationParams(max_tokens=1000), depth=DepthControl(4))
        assert finished(events).reason is FinishReason.CONTEXT_FULL
        assert "256-token context is full" in finished(events).message
        stats = finished(events).stats
        assert stats.prompt_tokens + stats.generated == runtime.n_ctx + 1  # every position used
        # The session is still usable: a new conversation on the same runtime works.
        again = run(Conversation(runtime), "Hi", GenerationParams(max_tokens=4), depth=DepthControl(4))
        assert finished(again).reason is FinishReason.MAX_TOKENS
    finally:
        runtime.close()


def test_prompt_longer_than_the_context_is_refused_and_nothing_changes(demo_pair) -> None:
    runtime = Runtime.load(demo_pair.target, None, n_ctx=256)
    try:
        session = Conversation(runtime, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        before = [dict(m) for m in session.messages]
        with pytest.raises(SpecchatError, match="context holds 256"):
            session.reply("word " * 400, GenerationParams())
        assert session.messages == before
        with pytest.raises(SpecchatError, match="no draft model"):
            session.reply("hi", GenerationParams(), drafter=DrafterKind.DRAFT_MODEL)
    finally:
        runtime.close()


def test_empty_conversation_is_refused(demo_runtime) -> None:
    with pytest.raises(SpecchatError, match="empty"):
        Conversation(demo_runtime).reply(None, GenerationParams())


def test_foreign_vocabulary_draft_is_refused_naming_the_difference(demo_pair, foreign_draft) -> None:
    stages: list[str] = []

    def loading(stage: str, fraction: float) -> bool:
        stages.append(stage)
        return True

    with pytest.raises(SpecchatError, match=r"token \d+ differs: target 'Ġthe', draft 'Ġteh'"):
        Runtime.load(demo_pair.target, foreign_draft, progress=loading)
    assert stages == [], "refused before either model's weights were loaded"


def test_auto_gpu_layers_load_and_report_placement(demo_pair) -> None:
    from specchat.core.llama.devices import offload_supported

    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=256, n_gpu_layers="auto", draft_gpu_layers="auto")
    try:
        assert runtime.draft is not None
        if offload_supported():
            assert runtime.target.n_gpu_layers != 0 or runtime.draft.n_gpu_layers != 0  # tiny pair fits any GPU
        else:
            assert (runtime.target.n_gpu_layers, runtime.draft.n_gpu_layers) == (0, 0)
            assert runtime.placement() == ("CPU", "CPU")
        events = run(Conversation(runtime), "Say hi.", GenerationParams(max_tokens=4), depth=DepthControl(2))
        assert isinstance(events[-1], Finished)
    finally:
        runtime.close()


def test_load_progress_is_reported_and_can_abort(demo_pair) -> None:
    seen: list[tuple[str, float]] = []

    def loading(stage: str, fraction: float) -> bool:
        seen.append((stage, fraction))
        return True

    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=256, progress=loading)
    runtime.close()
    assert {s for s, _ in seen} == {"target", "draft"}
    assert max(f for s, f in seen if s == "target") == pytest.approx(1.0)
    with pytest.raises(SpecchatError, match="could not load"):
        Runtime.load(demo_pair.target, progress=lambda stage, f: f < 0.5)


def test_engine_runs_on_a_worker_thread(demo_runtime) -> None:
    """The GUI drives the runtime from a worker thread; the generator must not care."""
    result: dict[str, object] = {}

    def work() -> None:
        session = Conversation(demo_runtime)
        result["events"] = run(session, "Say hello.", GenerationParams(max_tokens=8), depth=DepthControl(2))

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert isinstance(result["events"][-1], Finished)  # type: ignore[index]


def test_greedy_draft_at_temperature_drafts_the_argmax(demo_runtime) -> None:
    def first_draft(params: GenerationParams) -> tuple[int, ...]:
        session = Conversation(demo_runtime)
        for event in session.reply("Name three rivers.", params, depth=DepthControl(4)):
            if isinstance(event, Drafted):
                return event.tokens
        raise AssertionError("no draft")

    greedy = first_draft(GenerationParams(max_tokens=8))
    hot = SamplerParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    assert all(
        first_draft(GenerationParams(sampler=hot, max_tokens=8, seed=s, greedy_draft=True)) == greedy for s in range(3)
    )
    sampled = {first_draft(GenerationParams(sampler=hot, max_tokens=8, seed=s)) for s in range(6)}
    assert len(sampled) > 1  # a sampling draft really samples


def test_round_overhead_leaves_out_the_consumers_time(demo_runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow front end at each Drafted event must not make drafting look expensive to auto depth."""
    from specchat.core.engine.depth import AdaptiveDepth

    adaptive = AdaptiveDepth()
    monkeypatch.setitem(demo_runtime._adaptive, DrafterKind.DRAFT_MODEL, adaptive)
    session = Conversation(demo_runtime)
    pause = 0.1
    drafted_rounds = 0
    for event in session.reply("Count from one to ten.", GenerationParams(max_tokens=12), depth=DepthControl(3)):
        if isinstance(event, Drafted):
            drafted_rounds += 1
            time.sleep(pause)
    assert drafted_rounds >= 2
    assert adaptive.costs.overhead(True) < pause / 2


def test_device_bytes_counts_offloaded_layers(demo_pair, monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat.core.llama.devices import offload_supported
    from specchat.core.models.shape import read_model_shape
    from specchat.core.runtime import runtime as session_module

    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=512, n_gpu_layers=-1, draft_gpu_layers=0)
    try:
        if not offload_supported():
            assert runtime.device_bytes() == 0
            monkeypatch.setattr(session_module, "offload_supported", lambda: True)
        # All of the target (weights and a 512-token cache), none of the draft.
        assert runtime.device_bytes() == read_model_shape(demo_pair.target).memory_bytes(512)
    finally:
        runtime.close()


def test_failed_load_with_gpu_layers_mentions_gpu_memory(truncated_gguf, monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat.core.llama import devices
    from specchat.core.llama.model import Model

    with pytest.raises(SpecchatError, match=r"truncated or corrupt GGUF\?\): ") as cpu:
        Model(truncated_gguf, n_gpu_layers=-1 if not devices.offload_supported() else 0)
    assert "GPU" not in str(cpu.value)
    # The message a GPU build gives when layers were asked for (llama.cpp cannot say which it was).
    monkeypatch.setattr(devices, "offload_supported", lambda: True)
    with pytest.raises(SpecchatError, match="with 12 layers on the GPU") as gpu:
        Model(truncated_gguf, n_gpu_layers=12)
    assert "try GPU layers 'auto' or fewer" in str(gpu.value) and "\n" not in str(gpu.value)


def test_a_plain_probe_times_plain_decoding_after_the_reply_even_past_its_end(demo_runtime) -> None:
    """A reply that ends at EOS still gets its full probe (end tokens do not stop it); a stopped one gets none."""
    session = Conversation(demo_runtime)
    params = GenerationParams(max_tokens=64, plain_probe=16)
    events = run(session, "Say hello in one word.", params, drafter=DrafterKind.DRAFT_MODEL, depth=DepthControl(3))
    end = events[-1]
    assert isinstance(end, Finished) and end.reason is FinishReason.EOS, end
    assert end.stats.plain_tokens == 16 and end.stats.plain_tokens_per_second > 0
    last = next(e for e in reversed(events) if isinstance(e, Verified))
    probe_seconds = end.stats.plain_tokens / end.stats.plain_tokens_per_second
    assert end.stats.generate_seconds - last.elapsed < probe_seconds  # the reply's time ends before the probe

    cancel = CancelToken()
    stopped: list[Event] = []
    for event in session.reply("Write a long story about a dragon.", params, depth=DepthControl(4), cancel=cancel):
        stopped.append(event)
        if isinstance(event, Verified):
            cancel.cancel()
    assert finished(stopped).reason is FinishReason.CANCELLED and finished(stopped).stats.plain_tokens == 0
