"""Drafting with the target's own MTP (NextN) heads, on a random-weight Qwen3.5 with one MTP layer.

The heads of tests/models/qwen35-mtp.gguf are random, so they guess badly
and nearly every round is rejected: what these tests check is that MTP
drafting is lossless and that the heads follow the target exactly, whatever
the cuts. Random logits are flat, so the tests lower the draft p-min below
the MTP default (0.75) to get drafts at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.sampling import distribution
from specchat.core.llama.context import Context, MtpContext
from specchat.core.llama.model import Model
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    Drafted,
    DrafterKind,
    Event,
    FinishReason,
    GenerationParams,
    SamplerParams,
    SpecchatError,
    Verified,
)
from support.events import finished
from support.identity import assert_same_or_tie, plain_greedy
from support.stats import assert_follows

MODELS = Path(__file__).resolve().parent.parent / "models"
MTP_MODEL = MODELS / "qwen35-mtp.gguf"
PENALTY = SamplerParams(repeat_penalty=1.3)
GREEDY = GenerationParams(sampler=PENALTY, max_tokens=40, draft_p_min=0.0)
MTP = DrafterKind.MTP


@pytest.fixture(scope="module", params=[16, 0], ids=["snapshots", "saved-states"])
def runtime(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    """The MTP target, rolling back in place (snapshots) or from saved states."""
    loaded = Runtime.load(MTP_MODEL, n_ctx=256, n_threads=1, target_rollback=request.param)
    yield loaded
    loaded.close()


def reply(session: Conversation, text: str | None, params: GenerationParams = GREEDY, **kwargs: object) -> list[Event]:
    return list(session.reply(text, params, drafter=MTP, **kwargs))  # type: ignore[arg-type]


def check(
    runtime: Runtime,
    conversation: list[dict[str, str]],
    tokens: list[int],
    label: str,
    params: GenerationParams = GREEDY,
) -> None:
    """``tokens`` are plain greedy decoding's reply to ``conversation`` under ``params``, or part from it at a tie."""
    prompt = runtime.prompt(conversation).tokens
    sampler = params.sampler
    plain = plain_greedy(runtime.target_context, prompt, params.max_tokens, sampler, runtime.target.eog_tokens)
    assert_same_or_tie(runtime.target_context, prompt, plain, tokens, sampler, label)


def fresh_heads_logits(sequence: list[int]) -> np.ndarray:
    """The heads' first guess after ``sequence``, from a new target that decoded it in one batch."""
    model = Model(MTP_MODEL, load_mtp=True)
    target = Context(model, n_ctx=256, n_threads=1)
    mtp = MtpContext(target, n_threads=1)
    try:
        target.decode(sequence[:-1])
        row = mtp.begin(sequence[-1], len(sequence) - 1)
        assert row is not None
        return np.array(row)  # a copy: the row is the context's buffer
    finally:
        mtp.close()
        target.close()
        model.close()


def test_an_mtp_target_loads_its_heads_and_a_plain_one_does_not() -> None:
    runtime = Runtime.load(MODELS / "qwen35.gguf", n_ctx=256, n_threads=1)
    try:
        assert not runtime.has_mtp
        session = Conversation(runtime)
        with pytest.raises(SpecchatError, match="has no MTP heads") as refused:
            session.reply("Hi.", GREEDY, drafter=MTP)
        assert "\n" not in str(refused.value) and session.messages == []
    finally:
        runtime.close()


@pytest.mark.parametrize("depth", [1, 4, 16, None], ids=["1", "4", "16", "auto"])
def test_greedy_mtp_speculation_matches_plain_decoding(runtime: Runtime, depth: int | None) -> None:
    assert runtime.has_mtp
    runtime._adaptive.clear()
    drafted = 0
    for i, text in enumerate(("Tell me about the sea.", "Count to ten, please.")):
        runtime.target_context.truncate(0)
        session = Conversation(runtime)
        events = reply(session, text, depth=DepthControl(depth))
        end = finished(events)
        assert end.reason is FinishReason.MAX_TOKENS, end.message
        for event in events:
            if isinstance(event, Drafted):
                assert 0 < len(event.tokens) <= (depth or 16)
        drafted += finished(events).stats.drafted
        check(runtime, session.messages[:-1], session.last_tokens, f"depth {depth} reply {i}")
    assert drafted > 0


def test_the_heads_follow_the_target_through_turns_cuts_and_a_cancel(runtime: Runtime) -> None:
    runtime.target_context.truncate(0)
    session = Conversation(runtime)
    reply(session, "What is the capital of France?", depth=DepthControl(4))
    cancel = CancelToken()
    for event in session.reply("And of Italy?", GREEDY, drafter=MTP, depth=DepthControl(8), cancel=cancel):
        if isinstance(event, Verified) and event.round == 2:
            cancel.cancel()
    reply(session, "Thanks.", depth=DepthControl(16))
    # The target holds the conversation but its last token; the heads must guess as a fresh pair would.
    prompt = runtime.prompt(session.messages[:-1]).tokens
    sequence = [*prompt, *session.last_tokens]
    ctx = runtime.target_context
    assert ctx.tokens == sequence[:-1]
    heads = runtime.mtp_context
    assert heads is not None
    live = heads.begin(sequence[-1], len(sequence) - 1)
    assert live is not None
    live = live.copy()
    heads.end(len(sequence) - 1)
    fresh = fresh_heads_logits(sequence)
    assert np.abs(live - fresh).max() < 1e-3 * np.abs(fresh).max()
    check(runtime, session.messages[:-1], session.last_tokens, "third turn")


def test_mtp_p_min_defaults_to_the_published_cutoff(runtime: Runtime) -> None:
    runtime.target_context.truncate(0)
    default = reply(
        Conversation(runtime),
        "Tell me about the sea.",
        GenerationParams(sampler=PENALTY, max_tokens=12),
        depth=DepthControl(4),
    )
    assert finished(default).stats.drafted == 0  # random heads are never 75% sure
    ungated = GenerationParams(sampler=PENALTY, max_tokens=12, draft_p_min=0.0)  # 0 means no gate, as asked
    gated_off = reply(Conversation(runtime), "Tell me about the sea.", ungated, depth=DepthControl(4))
    assert finished(gated_off).stats.drafted > 0


def test_sampling_with_mtp_follows_the_target_distribution(runtime: Runtime) -> None:
    """The exact rule with the heads' own distribution q, on a hybrid target: chi-square of the first token."""
    sampler = SamplerParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    messages = [{"role": "user", "content": "Name a fruit."}]
    prompt = runtime.prompt(messages).tokens
    runtime.target_context.truncate(0)
    p1 = distribution(runtime.target_context.decode(prompt)[0].copy(), [], sampler)
    n = 400
    seen: Counter[int] = Counter()
    for seed in range(n):
        session = Conversation(runtime)
        events = reply(
            session,
            messages[0]["content"],
            GenerationParams(sampler=sampler, max_tokens=4, seed=seed, draft_p_min=0.0),
            depth=DepthControl(3),
        )
        assert any(isinstance(e, Drafted) for e in events)
        seen[session.last_tokens[0]] += 1
    assert_follows(seen, p1.ids, p1.probs, n)


def test_the_composite_over_the_heads_drafts_from_both_and_matches_plain_decoding(runtime: Runtime) -> None:
    """Automatic drafting with MTP heads as its model: lookup and heads take turns on a hybrid target, losslessly.

    Without a repeat penalty the random target soon writes in loops, which lookup drafts.
    """
    sampler = SamplerParams(repeat_penalty=1.0)
    params = GenerationParams(sampler=sampler, max_tokens=48, draft_p_min=0.0)
    runtime.target_context.truncate(0)
    sources: Counter[str] = Counter()
    for i, text in enumerate(("Tell me about the sea.", "Count to ten, please.")):
        session = Conversation(runtime)
        events = list(session.reply(text, params, drafter=DrafterKind.COMPOSITE, depth=DepthControl(None)))
        end = finished(events)
        assert end.reason is FinishReason.MAX_TOKENS, end.message
        for event in events:
            if isinstance(event, Drafted):
                sources.update(s.value for s in event.sources)
        check(runtime, session.messages[:-1], session.last_tokens, f"composite reply {i}", params)
    assert sources["mtp"] > 0 and sources["lookup"] > 0, sources


def test_the_composite_drafts_by_lookup_while_unsure_heads_draft_nothing(runtime: Runtime) -> None:
    """Random heads are never 75% sure (the default p-min): the composite must not keep waiting on them."""
    sampler = SamplerParams(repeat_penalty=1.0)
    runtime.target_context.truncate(0)
    runtime._kept.pop(DrafterKind.COMPOSITE, None)  # a fresh composite, which has never seen the heads draft
    session = Conversation(runtime)
    params = GenerationParams(sampler=sampler, max_tokens=48)
    events = list(
        session.reply("Tell me about the sea.", params, drafter=DrafterKind.COMPOSITE, depth=DepthControl(None))
    )
    stats = finished(events).stats
    assert stats.by_source.get("lookup", [0, 0])[1] > 0 and stats.by_source.get("mtp", [0, 0])[0] == 0, stats
    check(runtime, session.messages[:-1], session.last_tokens, "lookup with unsure heads", params)
