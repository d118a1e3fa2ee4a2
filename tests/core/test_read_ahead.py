"""Reading a prompt ahead on the real demo pair: both contexts hold it, the reply reads only what changed, a
cancel stops it within one chunk, an edit reads from the common prefix, the greedy reply is the same, and
Automatic drafts with the model from its first round without paying the read."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.composite import CompositeDrafter
from specchat.core.engine.composite.pricing import Candidate, Costs
from specchat.core.engine.drafters import DraftModelDrafter
from specchat.core.engine.drafters.base import DraftRequest
from specchat.core.engine.lookup import Found
from specchat.core.engine.registry import entry_for
from specchat.core.engine.speculative import generate
from specchat.core.runtime.read_ahead import READ_AHEAD_CHUNK, read_ahead, readable
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    DrafterKind,
    Finished,
    FinishReason,
    GenerationParams,
    SamplerParams,
    Verified,
    common_prefix_len,
)
from support.identity import assert_same_or_tie, plain_greedy

pytestmark = pytest.mark.slow

DOCUMENT = " ".join(f"Line {i}: the harbour master logged {i * 7 % 31} boats before noon." for i in range(40))
QUESTION = "Proofread this report and list its mistakes:\n\n" + DOCUMENT
GREEDY = GenerationParams(sampler=SamplerParams(temperature=0.0), max_tokens=16)


def messages(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are a careful editor."}, {"role": "user", "content": text}]


def reply(runtime: Runtime, tokens: list[int], drafter: DraftModelDrafter) -> tuple[list[int], Finished]:
    out: list[int] = []
    for event in generate(runtime.target_side, drafter, tokens, GREEDY):
        if isinstance(event, Verified):
            out.extend(event.committed)
        if isinstance(event, Finished):
            assert event.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS), event.message
            return out, event
    raise AssertionError("the reply did not finish")


def fresh(runtime: Runtime) -> None:
    runtime.empty_caches()  # no kept prompt loaded back: each test reads what it means to


def test_both_contexts_hold_the_prompt_and_the_reply_reads_none_of_it(demo_runtime) -> None:
    runtime = demo_runtime
    fresh(runtime)
    prompt = runtime.prompt(messages(QUESTION))
    body = prompt.tokens[:-1]
    assert len(body) > 8 * READ_AHEAD_CHUNK
    chunks: list[tuple[str, int]] = []
    done = read_ahead(
        runtime,
        prompt,
        CancelToken(),
        drafter=DrafterKind.COMPOSITE,
        on_chunk=lambda n, held, _: chunks.append((n, held)),
    )
    assert done.finished and done.draft
    assert (done.target_reused, done.target_read, done.draft_read) == (0, len(body), len(body))
    assert runtime.target_context.tokens == body and runtime.draft_context is not None
    assert runtime.draft_context.tokens == body
    target_steps = [held for name, held in chunks if name == "target"]
    assert target_steps[0] == READ_AHEAD_CHUNK and target_steps[-1] == len(body)
    assert all(0 < b - a <= READ_AHEAD_CHUNK for a, b in zip(target_steps, target_steps[1:], strict=False))

    drafter = DraftModelDrafter(runtime.draft_context)
    ahead, finished = reply(runtime, prompt.tokens, drafter)
    assert finished.stats.reused_prompt_tokens == len(body)  # the target read nothing of the prompt
    assert drafter.read[0] == 0  # nor did the draft model

    fresh(runtime)  # the same reply read the usual way, in one batch
    plain_read, finished = reply(runtime, prompt.tokens, DraftModelDrafter(runtime.draft_context))
    assert finished.stats.reused_prompt_tokens == 0
    if ahead != plain_read:  # batch shapes differ: only a float tie may tell them apart
        plain = plain_greedy(runtime.target_context, prompt.tokens, len(plain_read), GREEDY.sampler)
        assert_same_or_tie(runtime.target_context, prompt.tokens, plain, ahead, GREEDY.sampler, "read ahead")
        assert_same_or_tie(runtime.target_context, prompt.tokens, plain, plain_read, GREEDY.sampler, "read whole")
    runtime.forget_contexts()


def test_a_cancel_stops_it_within_one_chunk_and_the_reply_reads_the_rest(demo_runtime) -> None:
    runtime = demo_runtime
    fresh(runtime)
    prompt = runtime.prompt(messages(QUESTION))
    body = prompt.tokens[:-1]
    cancel = CancelToken()
    seen: list[int] = []

    def send_pressed(_name: str, held: int, _total: int) -> None:
        seen.append(held)
        cancel.cancel()  # as Send does, from the GUI thread, while this chunk is read

    done = read_ahead(runtime, prompt, cancel, drafter=DrafterKind.COMPOSITE, on_chunk=send_pressed)
    assert not done.finished and seen == [READ_AHEAD_CHUNK]
    assert done.target_read == READ_AHEAD_CHUNK and done.draft_read == 0
    assert runtime.target_context.tokens == body[:READ_AHEAD_CHUNK]
    assert runtime.draft_context is not None and runtime.draft_context.tokens == []
    _, finished = reply(runtime, prompt.tokens, DraftModelDrafter(runtime.draft_context))
    assert finished.stats.reused_prompt_tokens == READ_AHEAD_CHUNK  # the reply read the rest
    assert runtime.target_context.tokens[: len(body)] == body
    runtime.forget_contexts()


def test_an_edit_reads_from_the_common_prefix(demo_runtime) -> None:
    runtime = demo_runtime
    fresh(runtime)
    first = runtime.prompt(messages(QUESTION)).tokens[:-1]
    read_ahead(runtime, first + [0], CancelToken(), drafter=DrafterKind.NGRAM)
    edited = runtime.prompt(messages(QUESTION.replace("Line 30:", "Line thirty:"))).tokens
    shared = common_prefix_len(first, edited[:-1])
    assert 0 < shared < len(first) - 20
    done = read_ahead(runtime, edited, CancelToken(), drafter=DrafterKind.NGRAM)
    assert done.finished and not done.draft  # lookup drafts with no model: the draft's context is left alone
    assert (done.target_reused, done.target_read) == (shared, len(edited) - 1 - shared)
    assert runtime.target_context.tokens == edited[:-1]
    assert runtime.draft_context is not None and runtime.draft_context.tokens == []
    runtime.forget_contexts()


def test_only_dense_local_contexts_are_read(demo_runtime) -> None:
    names = [name for name, _ in readable(demo_runtime, DrafterKind.DRAFT_MODEL)]
    assert names == ["target", "draft"]
    assert [name for name, _ in readable(demo_runtime, DrafterKind.NONE)] == ["target"]
    assert [name for name, _ in readable(demo_runtime, "no such drafter")] == ["target", "draft"]  # the default's


def seasoned(runtime: Runtime) -> CompositeDrafter:
    """A fresh composite as earlier replies leave it: the model's costs timed (a draft a twentieth of a target
    pass, a prompt token read at a fifth), replies here about 16 tokens long. Its prompt read is then priced
    against what the model saves over the rest of the reply, not let through as a guess."""
    drafter = entry_for(DrafterKind.COMPOSITE, runtime.parts).make(runtime.parts)
    assert isinstance(drafter, CompositeDrafter)
    drafter.timings.fixed = drafter.timings.step = 0.05
    drafter.timings.read_token = 0.2
    drafter._reply_tokens = 16.0
    return drafter


def first_round(runtime: Runtime, drafter: CompositeDrafter, tokens: list[int]) -> list[object]:
    """Run ``drafter``'s reply to ``tokens`` until it has decided its first drafting round (the first token comes
    from the prompt's own pass); what its weighing of the model's prompt read said then (None: the model may
    draft)."""
    weighed: list[object] = []
    weigh = drafter._without_read

    def recorded(request: DraftRequest, lookups: Sequence[Found], costs: Costs) -> Candidate | None:
        weighed.append(weigh(request, lookups, costs))
        return weigh(request, lookups, costs)

    drafter._without_read = recorded  # type: ignore[method-assign]
    for _event in generate(runtime.target_side, drafter, tokens, GREEDY):
        if sum(drafter.wins.values()):
            break
    assert sum(drafter.wins.values()) == 1 and len(weighed) == 1
    return weighed


def test_automatic_drafts_with_the_model_from_the_first_round_when_the_prompt_was_read_ahead(demo_runtime) -> None:
    runtime = demo_runtime
    prompt = runtime.prompt(messages(QUESTION))

    fresh(runtime)  # not read ahead: reading 600 tokens costs more than the model would save, so it waits
    waiting = seasoned(runtime)
    assert first_round(runtime, waiting, prompt.tokens) != [None]
    assert waiting.wins["model"] == 0 and waiting._unread_tokens() > 600
    assert waiting.model.read == (0, 0.0)  # it never read the prompt

    fresh(runtime)
    assert read_ahead(runtime, prompt, CancelToken(), drafter=DrafterKind.COMPOSITE).finished
    ready = seasoned(runtime)
    assert first_round(runtime, ready, prompt.tokens) == [None]  # nothing left to read: nothing to weigh
    assert ready._unread_tokens() == 0
    assert ready.wins["model"] == 1  # it drafted with the model in the reply's first round
    assert ready.model.read[0] == 0  # and read none of the prompt to do so
    runtime.forget_contexts()
