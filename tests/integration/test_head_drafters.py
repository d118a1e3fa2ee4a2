"""Drafting with EAGLE-3, DFlash and DSpark heads on a dense (llama) and a hybrid (qwen35) target.

The heads in tests/models are random (tests/models/make_head_models.py), so
their greedy guesses are nearly always rejected: the greedy tests check that
head drafting is lossless and follows the target through every cut; the
sampling tests (broad distributions, so that many drafts are accepted) check
the exact rule and that the head's cache stays in step after accepted drafts.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.registry import drafter_entry
from specchat.core.engine.sampling import distribution
from specchat.core.llama.context import Context
from specchat.core.llama.heads import DFlashContext, Eagle3Context, HeadApi, HeadKind, head_info, open_head
from specchat.core.llama.model import Model
from specchat.core.models.heads import check_head, read_head
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    Drafted,
    DrafterKind,
    DraftSource,
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
from support.identity import assert_same_or_tie, plain_greedy
from support.stats import assert_follows

MODELS = Path(__file__).resolve().parent.parent / "models"
HEADS = {
    "eagle3": DrafterKind.EAGLE3,
    "dflash": DrafterKind.DFLASH,
    "dflash2": DrafterKind.DFLASH,
    "dspark": DrafterKind.DSPARK,
}
TARGETS = ["llama", "qwen35"]  # dense, hybrid (Gated DeltaNet)
# the engines: dense; hybrid rolling back in place (recurrent snapshots); hybrid restoring saved states
ENGINES = [("llama", 16), ("qwen35", 16), ("qwen35", 0)]
PENALTY = SamplerParams(repeat_penalty=1.3)
GREEDY = GenerationParams(sampler=PENALTY, max_tokens=32)
BROAD = SamplerParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


@pytest.fixture(
    scope="module",
    params=[(t, r, h) for t, r in ENGINES for h in HEADS],
    ids=lambda p: f"{p[0]}{'' if p[1] else '-saved-states'}-{p[2]}",
)
def runtime(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    target, rollback, head = request.param
    loaded = Runtime.load(
        MODELS / f"{target}.gguf", MODELS / f"{head}-llama.gguf", n_ctx=256, n_threads=1, target_rollback=rollback
    )
    yield loaded
    loaded.close()


def kind_of(runtime: Runtime) -> DrafterKind:
    assert runtime.head_context is not None
    return HEADS[runtime.head_context.head_kind]


def reply(session: Conversation, text: str | None, params: GenerationParams = GREEDY, **kwargs: object) -> list[Event]:
    return list(session.reply(text, params, drafter=kind_of(session.runtime), **kwargs))  # type: ignore[arg-type]


def check(
    runtime: Runtime,
    conversation: list[dict[str, str]],
    tokens: list[int],
    label: str,
    params: GenerationParams = GREEDY,
) -> None:
    """``tokens`` are plain greedy decoding's reply to ``conversation``, or part from it at a tie."""
    prompt = runtime.prompt(conversation).tokens
    plain = plain_greedy(runtime.target_context, prompt, params.max_tokens, params.sampler, runtime.target.eog_tokens)
    assert_same_or_tie(runtime.target_context, prompt, plain, tokens, params.sampler, label)


def head_output(head: Eagle3Context | DFlashContext, sequence: list[int]) -> np.ndarray:
    """What the head proposes after ``sequence`` (the target holding all but its last token)."""
    pos = len(sequence) - 1
    if isinstance(head, Eagle3Context):
        row = head.begin(sequence[-1], pos)
        assert row is not None
        row = np.array(row)  # a copy: the row is the head's buffer
        head.end(pos)
        return row
    block = head.block(sequence[-1], pos, head.max_draft)
    assert block is not None
    if block.candidates is not None and block.scores is not None:  # DFlash2: the selector's lattice
        return canonical_lattice(block.candidates, block.scores)
    return np.array(block.logits)  # a copy: the head's buffer


def canonical_lattice(candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The lattice with each slot's candidates in id order (llama.cpp's top-k leaves them in no set order)."""
    order = np.argsort(candidates, axis=1)
    out = [np.sort(candidates, axis=1).ravel().astype(np.float32)]
    for i in range(len(candidates)):
        pred = order[i - 1] if i > 0 else np.arange(candidates.shape[1])
        out.append(scores[i][pred][:, order[i]].ravel())
    return np.concatenate(out)


def fresh_head_output(target: str, head: str, sequence: list[int]) -> np.ndarray:
    """The head's proposal after ``sequence`` from a new pair that decoded it in one batch."""
    model = Model(MODELS / f"{target}.gguf")
    head_model = Model(MODELS / f"{head}-llama.gguf")
    ctx = Context(model, n_ctx=256, n_threads=1)
    live = open_head(ctx, head_model, n_threads=1)
    try:
        ctx.decode(sequence[:-1])
        return head_output(live, sequence)
    finally:
        live.close()
        ctx.close()
        head_model.close()
        model.close()


def test_each_head_file_says_what_it_is() -> None:
    kinds = {}
    for name in HEADS:
        model = Model(MODELS / f"{name}-llama.gguf")
        try:
            info = head_info(model)
            kinds[name] = info
        finally:
            model.close()
    assert kinds["eagle3"].kind is HeadKind.EAGLE3 and kinds["eagle3"].target_layers == (0, 1, 1)
    assert kinds["dflash"].kind is HeadKind.DFLASH and kinds["dflash"].max_draft == 7
    assert not kinds["dflash"].causal and kinds["dflash"].mask_token == 127
    assert kinds["dflash2"].kind is HeadKind.DFLASH2 and kinds["dflash2"].selector_top_k == 4
    assert kinds["dflash2"].max_draft == 7
    assert kinds["dspark"].kind is HeadKind.DSPARK and kinds["dspark"].max_draft == 8
    assert kinds["dspark"].confidence_head and kinds["dspark"].sample_from_anchor
    assert kinds["eagle3"].describe() == "EAGLE-3 head (target layers 0, 1, 1)"


@pytest.mark.parametrize("depth", [1, 4, None], ids=["1", "4", "auto"])
def test_greedy_head_speculation_matches_plain_decoding(runtime: Runtime, depth: int | None) -> None:
    head = runtime.head_context
    assert head is not None
    source = DraftSource(head.head_kind.replace("dflash2", "dflash"))
    runtime._adaptive.clear()
    drafted = 0
    for i, text in enumerate(("Tell me about the sea.", "Count to ten, please.")):
        runtime.target_context.truncate(0)
        session = Conversation(runtime)
        events = reply(session, text, depth=DepthControl(depth))
        assert finished(events).reason is FinishReason.MAX_TOKENS, finished(events).message
        for event in events:
            if isinstance(event, Drafted):
                assert 0 < len(event.tokens) <= min(depth or 16, head.max_draft or 16)
                assert set(event.sources) == {source}
        drafted += finished(events).stats.drafted
        check(runtime, session.messages[:-1], session.last_tokens, f"depth {depth} reply {i}")
    assert drafted > 0


def test_the_head_follows_the_target_through_turns_accepted_drafts_and_a_cancel(runtime: Runtime) -> None:
    """After sampled turns (many drafts accepted, the rest cut) and a cancel, the head proposes as a fresh pair."""
    runtime.target_context.truncate(0)
    session = Conversation(runtime)
    sampled = GenerationParams(sampler=BROAD, max_tokens=40, seed=3)
    first = reply(session, "What is the capital of France?", sampled, depth=DepthControl(4))
    assert finished(first).stats.accepted > 0
    cancel = CancelToken()
    for event in session.reply(
        "And of Italy?", sampled, drafter=kind_of(runtime), depth=DepthControl(6), cancel=cancel
    ):
        if isinstance(event, Verified) and event.round == 2:
            cancel.cancel()
    reply(session, "Thanks.", GenerationParams(sampler=BROAD, max_tokens=24, seed=4), depth=DepthControl(5))
    prompt = runtime.prompt(session.messages[:-1]).tokens
    sequence = [*prompt, *session.last_tokens]
    ctx = runtime.target_context
    assert isinstance(ctx, Context) and ctx.tokens == sequence[:-1]
    if not ctx.in_place:
        assert ctx.stats.restores > 0  # the head followed cuts made by restoring saved states
    head = runtime.head_context
    assert head is not None
    live = head_output(head, sequence)
    target, name = runtime.target.path.stem, head.head.path.stem.split("-")[0]
    fresh = fresh_head_output(target, name, sequence)
    # The target's features differ in the last bits between batch shapes (measured: up to 1.3e-3 of the
    # largest logit); a head one position off is off by 0.16-0.8 of it.
    assert np.abs(live - fresh).max() < 1e-2 * np.abs(fresh).max()


@pytest.mark.parametrize("target", TARGETS)
def test_sampling_with_each_head_follows_the_target_distribution(target: str) -> None:
    """The exact rule with each head's own q: chi-square of the first token, drafts at depth 3 from round one."""
    # A broad top-k and a prompt where every random head's first candidates overlap the target's (DFlash2 offers
    # only four), so that first drafts are kept at times and the rule is exercised on both sides.
    sampler = SamplerParams(temperature=1.0, top_k=24, top_p=1.0, min_p=0.0)
    n = 400
    for name in HEADS:
        runtime = Runtime.load(MODELS / f"{target}.gguf", MODELS / f"{name}-llama.gguf", n_ctx=128, n_threads=1)
        try:
            messages = [{"role": "user", "content": "Tell me a story."}]
            prompt = runtime.prompt(messages).tokens
            runtime.target_context.truncate(0)
            p1 = distribution(runtime.target_context.decode(prompt)[0].copy(), [], sampler)
            seen: Counter[int] = Counter()
            accepted = 0
            for seed in range(n):
                session = Conversation(runtime)
                events = reply(
                    session,
                    messages[0]["content"],
                    GenerationParams(sampler=sampler, max_tokens=4, seed=seed),
                    depth=DepthControl(3),
                )
                drafted = [e for e in events if isinstance(e, Drafted)]
                assert drafted, name
                verified = next(e for e in events if isinstance(e, Verified))
                accepted += len(verified.accepted) > 0
                seen[session.last_tokens[0]] += 1
            assert accepted > 0, name  # the rule was exercised on both sides: some first drafts kept
            assert_follows(seen, p1.ids, p1.probs, n)
        finally:
            runtime.close()


def test_the_composite_over_a_head_drafts_from_both_and_matches_plain_decoding() -> None:
    """Automatic drafting with a head as its model: lookup still takes over where it quotes."""
    runtime = Runtime.load(MODELS / "llama.gguf", MODELS / "eagle3-llama.gguf", n_ctx=256, n_threads=1)
    try:
        params = GenerationParams(sampler=SamplerParams(repeat_penalty=1.0), max_tokens=48)
        sources: Counter[str] = Counter()
        for i, text in enumerate(("Tell me about the sea.", "Count to ten, please.")):
            session = Conversation(runtime)
            events = list(session.reply(text, params, drafter=DrafterKind.COMPOSITE, depth=DepthControl(None)))
            assert isinstance(events[-1], Finished) and finished(events).reason is FinishReason.MAX_TOKENS
            for event in events:
                if isinstance(event, Drafted):
                    sources.update(s.value for s in event.sources)
            check(runtime, session.messages[:-1], session.last_tokens, f"composite reply {i}", params)
        assert sources["lookup"] > 0 and sources["eagle3"] > 0, sources
    finally:
        runtime.close()


def test_draft_model_means_the_loaded_head_and_other_kinds_are_one_line_errors() -> None:
    runtime = Runtime.load(MODELS / "llama.gguf", MODELS / "dflash-llama.gguf", n_ctx=128, n_threads=1)
    try:
        assert runtime.draft_context is None and runtime.head_context is not None
        # the registry offers the head's own drafter (and automatic on it), not "Draft model" or the other heads
        assert [e.name for e in runtime.drafters()] == [
            DrafterKind.COMPOSITE,
            DrafterKind.NGRAM,
            DrafterKind.DFLASH,
            DrafterKind.NONE,
        ]
        assert drafter_entry(DrafterKind.COMPOSITE).label_for(runtime.offered) == "Automatic (lookup + DFlash head)"
        session = Conversation(runtime)
        events = list(
            session.reply("Hi.", GenerationParams(max_tokens=4), drafter=DrafterKind.DRAFT_MODEL, depth=DepthControl(2))
        )
        assert {s for e in events if isinstance(e, Drafted) for s in e.sources} == {DraftSource("dflash")}
        for kind in (DrafterKind.EAGLE3, DrafterKind.DSPARK, DrafterKind.MTP):
            with pytest.raises(SpecchatError) as refused:
                Conversation(runtime).reply("Hi.", GenerationParams(max_tokens=4), drafter=kind)
            assert "\n" not in str(refused.value)
        with pytest.raises(SpecchatError, match="needs a eagle3 head file.*DFlash head"):
            Conversation(runtime).reply("Hi.", GenerationParams(max_tokens=4), drafter=DrafterKind.EAGLE3)
    finally:
        runtime.close()


def test_a_head_for_another_model_is_refused_in_one_line(tmp_path: Path) -> None:
    # a target whose llama.cpp graph hands out no layer inputs
    with pytest.raises(SpecchatError, match="cannot hand it the hidden states of a 'mamba2' target") as refused:
        Runtime.load(MODELS / "mamba2.gguf", MODELS / "eagle3-llama.gguf", n_ctx=128, n_threads=1)
    assert "\n" not in str(refused.value)
    # a head reading a layer the target does not have (llama.cpp would abort the process)
    deep = copy_gguf(
        MODELS / "dflash-llama.gguf", tmp_path / "dflash-deep.gguf", values={"dflash.target_layers": [0, 5]}
    )
    with pytest.raises(
        SpecchatError, match="cannot draft for .*reads target layer 5, but the target has 2 layers"
    ) as refused:
        Runtime.load(MODELS / "llama.gguf", deep, n_ctx=128, n_threads=1)
    assert "\n" not in str(refused.value)
    # layer id n_layer (the final hidden state): a llama graph does not record it, so llama.cpp would abort;
    # the picker's header check and loading refuse it alike (one rule: core.models.heads.head_problems)
    final = copy_gguf(
        MODELS / "dflash-llama.gguf", tmp_path / "dflash-final.gguf", values={"dflash.target_layers": [0, 2]}
    )
    header = read_head(final)
    assert header is not None
    assert not check_head(MODELS / "llama.gguf", header).ok
    assert check_head(MODELS / "llama.gguf", read_head(MODELS / "dflash-llama.gguf")).ok  # type: ignore[arg-type]
    with pytest.raises(SpecchatError, match="reads target layer 2, but the target has 2 layers") as refused:
        Runtime.load(MODELS / "llama.gguf", final, n_ctx=128, n_threads=1)
    assert "\n" not in str(refused.value)


def test_a_library_without_the_head_calls_names_the_missing_one() -> None:
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    ggml = ctypes.CDLL(str(next(lib_dir.glob("libggml-base.*"))))  # a real library without llama.cpp's calls
    with pytest.raises(SpecchatError, match="lacks llama_set_embeddings_layer_inp") as refused:
        HeadApi(ggml)
    assert "\n" not in str(refused.value)
    HeadApi()  # the installed one has them all


@pytest.mark.parametrize("head", list(HEADS))
def test_specchat_chat_drafts_with_a_head_given_as_draft(head: str) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "specchat",
            "chat",
            "--target",
            str(MODELS / "qwen35.gguf"),
            "--draft",
            str(MODELS / f"{head}-llama.gguf"),
            "--max-tokens",
            "12",
            "--depth",
            "3",
            "--json",
            "Hi there",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["finish_reason"] == "max_tokens" and len(result["tokens"]) == 12
    source = head.replace("dflash2", "dflash")  # DFlash2 is llama-server's draft-dflash too
    assert set(result["by_source"]) == {source} and result["by_source"][source]["drafted"] > 0


def test_a_head_on_an_mtp_target_takes_the_place_of_its_mtp_heads() -> None:
    """One observer follows the target: with a head loaded, the head drafts and MTP is refused in one line."""
    runtime = Runtime.load(MODELS / "qwen35-mtp.gguf", MODELS / "eagle3-llama.gguf", n_ctx=128, n_threads=1)
    try:
        assert not runtime.has_mtp and runtime.head_context is not None
        assert runtime.target_context.observer is runtime.head_context  # type: ignore[union-attr]
        session = Conversation(runtime)
        events = reply(session, "Tell me about the sea.", depth=DepthControl(3))
        assert finished(events).stats.drafted > 0
        check(runtime, session.messages[:-1], session.last_tokens, "eagle3 on an MTP target")
        with pytest.raises(SpecchatError, match="has no MTP heads"):
            Conversation(runtime).reply("Hi.", GREEDY, drafter=DrafterKind.MTP)
    finally:
        runtime.close()
