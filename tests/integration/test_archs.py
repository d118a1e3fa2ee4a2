"""Speculation on dense, hybrid and recurrent targets: llama.cpp's own random-weight test models.

The models in tests/models (made by tests/models/make_test_models.py) are
tiny: 2 layers, a 128-token test vocabulary, a 256-token context. Each
architecture has a target, the same model requantized to Q8_0 (drafts
almost all accepted: most rounds keep everything) and a model of another
seed (drafts almost all rejected: every round takes positions back).

Greedy output must equal plain greedy decoding of the target, or leave it
only at a float tie (tests/support/identity.py). A repeat penalty of 1.3
keeps the random models' replies from collapsing into one repeated token.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.sampling import distribution
from specchat.core.llama.context import Context, probe_memory
from specchat.core.llama.model import Model, ModelKind
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
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
from support.gguf_copy import copy_gguf
from support.identity import TIE_RELATIVE_GAP, Comparison, assert_same_or_tie, plain_greedy
from support.stats import assert_follows

MODELS = Path(__file__).resolve().parent.parent / "models"
KINDS = {
    "llama": ModelKind.DENSE,
    "qwen35": ModelKind.HYBRID,
    "lfm2": ModelKind.HYBRID,
    "granitehybrid": ModelKind.HYBRID,
    "mamba2": ModelKind.RECURRENT,
}
IN_PLACE = {"llama", "qwen35", "lfm2"}  # architectures whose cuts need no saved state (at depth <= 16)
DRAFTS = {"same": "q8", "other": "seed2-q8"}
PENALTY = SamplerParams(repeat_penalty=1.3)
GREEDY = GenerationParams(sampler=PENALTY, max_tokens=40)
CONVERSATIONS = [
    [{"role": "user", "content": "Tell me about the sea."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to ten, please."}],
    [{"role": "user", "content": "Why is the sky blue? Explain it to a child."}],
]

EngineFactory = Callable[[str, str | None], Runtime]


def model_path(arch: str, draft: str | None = None) -> Path:
    return MODELS / (f"{arch}-{DRAFTS[draft]}.gguf" if draft else f"{arch}.gguf")


@pytest.fixture(scope="module")
def engines() -> Iterator[EngineFactory]:
    """``engines(arch, draft)`` loads (once per module) the target with the "same" or "other" draft, or none."""
    loaded: dict[tuple[str, str | None], Runtime] = {}

    def get(arch: str, draft: str | None = None) -> Runtime:
        key = (arch, draft)
        if key not in loaded:
            loaded[key] = Runtime.load(
                model_path(arch), model_path(arch, draft) if draft else None, n_ctx=256, n_threads=1
            )
        return loaded[key]

    yield get
    for runtime in loaded.values():
        runtime.close()


def target_of(runtime: Runtime) -> Context:
    """The target's context, loaded here (never a remote target)."""
    ctx = runtime.target_context
    assert isinstance(ctx, Context), ctx
    return ctx


def draft_of(runtime: Runtime) -> Context:
    """The draft model's context, which the pair must have."""
    ctx = runtime.draft_context
    assert ctx is not None
    return ctx


def forget(runtime: Runtime) -> None:
    """Empty both caches and the kept prompts, and zero the rollback counters."""
    runtime.empty_caches()
    for ctx in (target_of(runtime), runtime.draft_context):
        if ctx is not None:
            ctx.truncate(0)
            ctx.stats.reset()


def reply(session: Conversation, text: str | None, params: GenerationParams = GREEDY, **kwargs: object) -> list[Event]:
    return list(session.reply(text, params, **kwargs))  # type: ignore[arg-type]


def check_reply(runtime: Runtime, conversation: list[dict[str, str]], tokens: list[int], label: str) -> Comparison:
    """A reply to ``conversation`` against plain greedy decoding of it (this empties the target's cache)."""
    prompt = runtime.prompt(conversation).tokens
    plain = plain_greedy(runtime.target_context, prompt, GREEDY.max_tokens, PENALTY, runtime.target.eog_tokens)
    return assert_same_or_tie(runtime.target_context, prompt, plain, tokens, PENALTY, label)


def test_fixtures_are_the_kinds_they_stand_for() -> None:
    for arch, kind in KINDS.items():
        for draft in (None, *DRAFTS):
            model = Model(model_path(arch, draft), vocab_only=True)
            assert (model.arch, model.kind) == (arch, kind), model.path.name
            model.close()
    mtp = Model(MODELS / "qwen35-mtp.gguf", vocab_only=True)
    assert (mtp.kind, mtp.n_layer_nextn) == (ModelKind.HYBRID, 1)
    mtp.close()
    total = sum(p.stat().st_size for p in MODELS.glob("*.gguf"))
    assert total < 40e6, f"test models take {total / 1e6:.0f} MB"


@pytest.mark.parametrize("arch", list(KINDS))
@pytest.mark.parametrize(
    ("draft", "depth"),
    [
        ("same", 1),
        ("same", 4),
        ("same", 16),
        ("same", None),
        ("other", 1),
        ("other", 4),
        ("other", 16),
        ("other", None),
        ("ngram", 4),
        ("ngram", None),
    ],
    ids=[
        "same-1",
        "same-4",
        "same-16",
        "same-auto",
        "other-1",
        "other-4",
        "other-16",
        "other-auto",
        "ngram-4",
        "ngram-auto",
    ],
)
def test_greedy_speculation_matches_plain_decoding(
    engines: EngineFactory, arch: str, draft: str, depth: int | None
) -> None:
    runtime = engines(arch, None if draft == "ngram" else draft)
    drafter = DrafterKind.NGRAM if draft == "ngram" else DrafterKind.DRAFT_MODEL
    runtime._adaptive.clear()  # auto starts from its warm-up in every test
    totals: Counter[str] = Counter()
    ties = 0
    for i, messages in enumerate(CONVERSATIONS):
        forget(runtime)
        session = Conversation(runtime, messages[:-1])
        events = reply(session, messages[-1]["content"], drafter=drafter, depth=DepthControl(depth))
        done = events[-1]
        assert isinstance(done, Finished) and done.reason is FinishReason.MAX_TOKENS, done
        totals.update(
            drafted=done.stats.drafted,
            accepted=done.stats.accepted,
            rounds=sum(isinstance(e, Verified) and bool(e.accepted + e.rejected) for e in events),
            cut_rounds=sum(isinstance(e, Verified) and bool(e.rejected) for e in events),
        )
        stats = target_of(runtime).stats
        totals.update(in_place=stats.in_place, restores=stats.restores, restarts=stats.restarts)
        ties += check_reply(
            runtime, session.messages[:-1], session.last_tokens, f"{arch} {draft} depth {depth} conversation {i}"
        ).tie
    assert ties < len(CONVERSATIONS), "every conversation parted from plain decoding"
    if draft != "ngram":
        assert totals["drafted"] > 0
    if draft == "same" and depth is not None:
        assert totals["accepted"] > 0.5 * totals["drafted"], totals
    if draft == "other" and depth is not None:
        assert totals["cut_rounds"] > 0.8 * totals["rounds"], totals  # nearly every round takes drafts back
    assert totals["restarts"] == 0, totals  # no cut fell back to decoding the conversation again
    if totals["cut_rounds"]:
        if arch in IN_PLACE:
            assert totals["in_place"] >= totals["cut_rounds"] and totals["restores"] == 0, totals
        else:
            assert totals["restores"] >= totals["cut_rounds"], totals


@pytest.mark.parametrize("arch", list(KINDS))
def test_multi_turn_reuses_the_cache_exactly(engines: EngineFactory, arch: str) -> None:
    runtime = engines(arch, "other")
    forget(runtime)
    session = Conversation(runtime)
    first = reply(session, "What is the capital of France?", depth=DepthControl(4))
    turns = [(session.messages[:-1], session.last_tokens)]
    second = reply(session, "And of Italy?", depth=DepthControl(4))
    turns.append((session.messages[:-1], session.last_tokens))
    # The test tokenizer spells the reply differently when it comes back in the prompt, so the
    # reusable prefix is the first prompt: a recurrent state restores the one saved at its end.
    assert finished(second).stats.reused_prompt_tokens >= finished(first).stats.prompt_tokens - 1, finished(
        second
    ).stats
    assert target_of(runtime).stats.restarts == 0 and draft_of(runtime).stats.restarts == 0
    for i, (conversation, tokens) in enumerate(turns):
        check_reply(runtime, conversation, tokens, f"{arch} turn {i + 1}")


@pytest.mark.parametrize("arch", list(KINDS))
def test_a_plain_probe_after_a_reply_leaves_the_reply_and_the_cache_as_they_were(
    engines: EngineFactory, arch: str
) -> None:
    """The speed-up's denominator: plain decoding timed after the reply, then cut back (a recurrent target from
    a checkpoint, not by decoding the reply again); the replies and the next turn's reuse are unchanged."""
    runtime = engines(arch, "other")
    question = "What is the capital of France?"
    forget(runtime)
    unprobed = reply(Conversation(runtime), question, depth=DepthControl(4))
    replayed = target_of(runtime).stats.replayed_tokens
    forget(runtime)
    probed = dataclasses.replace(GREEDY, plain_probe=12)
    session = Conversation(runtime)
    first = reply(session, question, probed, depth=DepthControl(4))
    stats = finished(first).stats
    assert stats.plain_tokens == 12 and stats.plain_tokens_per_second > 0
    assert finished(unprobed).stats.plain_tokens == 0 and stats.generated == finished(unprobed).stats.generated
    prompt = runtime.prompt(session.messages[:-1]).tokens
    assert list(runtime.target_context.tokens) == prompt + session.last_tokens[:-1]
    assert target_of(runtime).stats.restarts == 0
    assert target_of(runtime).stats.replayed_tokens == replayed  # the probe's cut replayed nothing
    turns = [(session.messages[:-1], session.last_tokens)]
    second = reply(session, "And of Italy?", probed, depth=DepthControl(4))
    turns.append((session.messages[:-1], session.last_tokens))
    assert finished(second).stats.reused_prompt_tokens >= finished(first).stats.prompt_tokens - 1, finished(
        second
    ).stats
    for i, (conversation, tokens) in enumerate(turns):
        check_reply(runtime, conversation, tokens, f"{arch} probed turn {i + 1}")


@pytest.mark.parametrize("arch", list(KINDS))
def test_cancel_then_regenerate_and_continue(engines: EngineFactory, arch: str) -> None:
    runtime = engines(arch, "same")
    forget(runtime)
    session = Conversation(runtime)
    cancel = CancelToken()
    events = []
    for event in session.reply("Write a long story about a dragon.", GREEDY, depth=DepthControl(4), cancel=cancel):
        events.append(event)
        if isinstance(event, Verified) and event.round == 1:
            cancel.cancel()
    assert finished(events).reason is FinishReason.CANCELLED
    # Regenerate: drop the cut reply and answer the same message again, on the cache the cancel left.
    session.truncate_messages(len(session.messages) - 1)
    reply(session, None, depth=DepthControl(4))
    turns = [(session.messages[:-1], session.last_tokens)]
    reply(session, "Now say goodbye.", depth=DepthControl(16))
    turns.append((session.messages[:-1], session.last_tokens))
    assert target_of(runtime).stats.restarts == 0 and draft_of(runtime).stats.restarts == 0
    for label, (conversation, tokens) in zip(("regenerated", "after cancel"), turns, strict=True):
        check_reply(runtime, conversation, tokens, f"{arch} {label}")


def test_sampling_follows_the_target_distribution_on_a_hybrid(engines: EngineFactory) -> None:
    """The exact rule on qwen35 with a draft of another seed (most drafts rejected: the residual path)."""
    runtime = engines("qwen35", "other")
    sampler = SamplerParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    messages = [{"role": "user", "content": "Name a fruit."}]
    prompt = runtime.prompt(messages).tokens
    forget(runtime)
    p1 = distribution(runtime.target_context.decode(prompt)[0].copy(), [], sampler)
    n = 400
    seen: Counter[int] = Counter()
    rejected = 0
    for seed in range(n):
        session = Conversation(runtime)
        events = reply(
            session,
            messages[0]["content"],
            GenerationParams(sampler=sampler, max_tokens=4, seed=seed),
            depth=DepthControl(3),
        )
        seen[session.last_tokens[0]] += 1
        rejected += bool(next(e for e in events if isinstance(e, Verified)).rejected)
    assert rejected > n // 3, rejected  # the residual distribution did much of the work
    assert_follows(seen, p1.ids, p1.probs, n)


@pytest.mark.parametrize("arch", list(KINDS))
def test_batched_and_single_token_logits_differ_well_below_the_tie_threshold(engines: EngineFactory, arch: str) -> None:
    """What TIE_RELATIVE_GAP is measured against: verify batches and the same positions decoded one by one."""
    ctx = engines(arch, None).target_context
    rng = np.random.default_rng(7)
    worst = 0.0
    for k in (1, 4, 9, 16):
        tokens = [int(t) for t in rng.integers(0, ctx.n_vocab, 30 + k + 1)]
        ctx.truncate(0)
        ctx.decode(tokens[:30])
        batched = ctx.decode(tokens[30:], all_logits=True).copy()
        ctx.truncate(0)
        ctx.decode(tokens[:30])
        single = np.stack([ctx.decode([t])[0].copy() for t in tokens[30:]])
        worst = max(worst, float(np.abs(batched - single).max() / np.abs(single).max()))
    ctx.truncate(0)
    assert worst < TIE_RELATIVE_GAP / 2, (arch, worst)


# --- the context's cuts, checked one by one ---------------------------------------------------------


def fresh_logits(model: Model, tokens: list[int]) -> np.ndarray:
    ctx = Context(model, n_ctx=256, n_threads=1)
    try:
        return np.array(ctx.decode(tokens)[0])  # a copy: the row is the context's buffer
    finally:
        ctx.close()


@pytest.mark.parametrize("arch", ["qwen35", "lfm2", "mamba2", "granitehybrid"])
def test_refused_cuts_recover_the_exact_state(arch: str) -> None:
    model = Model(model_path(arch))
    ctx = Context(model, n_ctx=256, n_threads=1, rollback=8)
    try:
        tokens = [int(t) for t in np.random.default_rng(3).integers(0, model.n_vocab, 30)]
        expect_in_place = arch in IN_PLACE
        assert (ctx.rollback_depth > 0) == expect_in_place

        # A cut right after a batch: in place where the architecture keeps snapshots.
        ctx.decode(tokens[:20])
        ctx.truncate(15)
        assert (ctx.stats.in_place, ctx.stats.restarts) == ((1, 0) if expect_in_place else (0, 1))
        assert ctx.tokens == tokens[:15]
        np.testing.assert_allclose(ctx.decode([tokens[15]])[0], fresh_logits(model, tokens[:16]), atol=1e-4)

        # A cut behind single-token decodes: no snapshot covers it (llama.cpp itself would accept the
        # cut and continue from a stale snapshot); the saved state is restored instead.
        ctx.checkpoint("round")
        replayed = ctx.stats.replayed_tokens
        for t in tokens[16:22]:
            ctx.decode([t])
        ctx.truncate(19)
        assert ctx.stats.restores == 1 and ctx.stats.replayed_tokens - replayed == 3 and ctx.tokens == tokens[:19]
        np.testing.assert_allclose(ctx.decode([tokens[19]])[0], fresh_logits(model, tokens[:20]), atol=1e-4)

        # Behind the checkpoint: the sequence is decoded again from the start.
        ctx.truncate(10)
        assert ctx.stats.restarts == (1 if expect_in_place else 2) and ctx.tokens == tokens[:10]
        np.testing.assert_allclose(ctx.decode([tokens[10]])[0], fresh_logits(model, tokens[:11]), atol=1e-4)
    finally:
        ctx.close()
        model.close()


def test_memory_probe_says_kind_and_rollback() -> None:
    for arch, kind in KINDS.items():
        info = probe_memory(model_path(arch))
        assert (info.arch, info.kind) == (arch, kind)
        assert info.in_place == (arch in IN_PLACE)
        assert (info.rollback == 16) == (arch in {"qwen35", "lfm2"})
    mtp = probe_memory(MODELS / "qwen35-mtp.gguf")
    assert mtp.n_layer_nextn == 1 and "1 MTP layer" in mtp.describe()


# --- the terminal ------------------------------------------------------------------------------------


def specchat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args], capture_output=True, text=True, env={**os.environ}, timeout=300
    )


def test_info_and_models_check_say_the_kind() -> None:
    out = specchat("info", str(model_path("qwen35")))
    assert out.returncode == 0, out.stderr
    assert "hybrid (qwen35): rolls back up to 16 drafts in place" in out.stdout
    out = specchat("models", "check", str(model_path("mamba2")), str(model_path("mamba2", "same")))
    assert out.returncode == 0, out.stderr
    assert "recurrent (mamba2): cannot roll back in place" in out.stdout


def test_greedy_chat_on_a_recurrent_target_in_the_terminal() -> None:
    out = specchat(
        "chat",
        "--target",
        str(model_path("mamba2")),
        "--draft",
        str(model_path("mamba2", "other")),
        "--repeat-penalty",
        "1.3",
        "--max-tokens",
        "24",
        "--depth",
        "4",
        "--json",
        "Hello there.",
    )
    assert out.returncode == 0, out.stderr
    assert '"finish_reason": "max_tokens"' in out.stdout


def test_unknown_architecture_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = copy_gguf(model_path("llama"), tmp_path / "future.gguf", values={"general.architecture": "llama99"})
    out = specchat("chat", "--target", str(bad), "--no-spec", "--max-tokens", "4", "Hi.")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "does not know the model architecture 'llama99'" in out.stderr


def test_hybrid_on_bindings_that_cannot_save_state_is_refused_before_loading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import llama_cpp

    from specchat.__main__ import main

    monkeypatch.delattr(llama_cpp, "llama_state_seq_get_size")
    stages: list[str] = []

    def loading(stage: str, fraction: float) -> bool:
        stages.append(stage)
        return True

    with pytest.raises(SpecchatError, match=r"qwen35\.gguf is a hybrid model \(qwen35\) and this llama\.cpp build"):
        Runtime.load(model_path("qwen35"), model_path("qwen35", "same"), progress=loading)
    assert stages == [], "refused before either model's weights were loaded"
    Runtime.load(model_path("llama"), n_ctx=256).close()  # dense models need no saved state
    assert main(["chat", "--target", str(model_path("mamba2")), "--no-spec", "Hi."]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mamba2.gguf is a recurrent model (mamba2)" in err
