"""Attachments and predictions as drafting sources on real models: replies stay plain decoding's (greedy, ties
told apart), the exact rule holds at T > 0, and every draft names the text it came from."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from specchat.core.engine.depth import DepthControl
from specchat.core.engine.lookup import LookupText
from specchat.core.engine.sampling import distribution
from specchat.core.engine.speculative import generate
from specchat.core.runtime.runtime import Runtime
from specchat.core.runtime.sources import PREDICTION_ANCHOR
from specchat.core.types import (
    PREDICTION_NAME,
    Drafted,
    DrafterKind,
    DraftSource,
    Event,
    Finished,
    GenerationParams,
    SamplerParams,
    TextSource,
    Verified,
)
from support.identity import assert_same_or_tie, plain_greedy
from support.stats import assert_fits

MODELS = Path(__file__).resolve().parent.parent / "models"
PENALTY = SamplerParams(repeat_penalty=1.3)
GREEDY = GenerationParams(sampler=PENALTY, max_tokens=40)
UNRELATED = "The committee met on Tuesday to discuss the budget for the new library wing. " * 6


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    loaded = Runtime.load(MODELS / "llama.gguf", MODELS / "llama-q8.gguf", n_ctx=512, n_threads=1)
    yield loaded
    loaded.close()


def reply_tokens(events: Sequence[Event]) -> list[int]:
    return [t for e in events if isinstance(e, Verified) for t in e.committed]


def check_origins(events: Sequence[Event], names: set[str]) -> Counter[str]:
    """Every drafted token's origin: parallel to its sources, a named text only for a lookup's. Counts by origin."""
    seen: Counter[str] = Counter()
    for e in events:
        if isinstance(e, Drafted | Verified):
            drafted = e.tokens if isinstance(e, Drafted) else e.accepted + e.rejected
            assert len(e.origins) == len(e.sources) == len(drafted)
            for origin, source in zip(e.origins, e.sources, strict=True):
                assert origin == "" or (origin in names and source is DraftSource.LOOKUP)
                if isinstance(e, Verified):
                    seen[origin] += 1
    return seen


@pytest.mark.parametrize("drafter", [DrafterKind.NGRAM, DrafterKind.COMPOSITE])
def test_greedy_replies_with_a_prediction_or_a_document_are_plain_decoding_s(runtime: Runtime, drafter: str) -> None:
    """The texts as the runtime hands them to the loop (a prediction after the prompt's tail): the reply itself,
    an unrelated text, and two documents. (These test models do not give back their text's tokens when it is
    tokenized again, so the texts are given as tokens here; the demo pair's test below gives them as text.)"""
    messages = [{"role": "user", "content": "Write a short story about a lighthouse keeper and the sea."}]
    prompt = runtime.prompt(messages).tokens
    plain = plain_greedy(runtime.target_context, prompt, GREEDY.max_tokens, PENALTY, runtime.target.eog_tokens)
    unrelated = [int(t) for t in np.random.default_rng(1).integers(3, runtime.target.n_vocab, size=120)]
    anchor = prompt[-PREDICTION_ANCHOR:]
    cases = [
        [LookupText.of(PREDICTION_NAME, [*anchor, *plain])],
        [LookupText.of(PREDICTION_NAME, [*anchor, *unrelated])],
        [LookupText.of("story.txt", [*unrelated[:10], *plain[4:]]), LookupText.of("minutes.txt", unrelated)],
    ]
    origins: Counter[str] = Counter()
    for texts in cases:
        events = list(
            generate(
                runtime.target_side,
                runtime.drafter_for(drafter),
                prompt,
                GREEDY,
                depth=DepthControl(None if drafter == DrafterKind.COMPOSITE else 6),
                texts=texts,
            )
        )
        assert isinstance(events[-1], Finished)
        assert_same_or_tie(runtime.target_context, prompt, plain, reply_tokens(events), PENALTY, texts[0].name)
        origins += check_origins(events, {t.name for t in texts})
    assert origins[PREDICTION_NAME] >= 8 and origins["story.txt"] > 0, origins  # the texts were drafted from


def test_the_exact_rule_holds_with_a_prediction_at_temperature(runtime: Runtime) -> None:
    """Chi-square test of the first two tokens, half the replies drafted from a prediction of the likeliest first
    token, against the target's own distribution."""
    sampler = SamplerParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    prompt = runtime.prompt([{"role": "user", "content": "ab ab ab ab ab"}]).tokens
    ctx = runtime.target_context
    ctx.truncate(0)
    p1 = distribution(ctx.decode(prompt)[0].copy(), [], sampler)
    likeliest = int(p1.ids[int(np.argmax(p1.probs))])
    prediction = LookupText.of(PREDICTION_NAME, [*prompt[-4:], likeliest, likeliest])
    n = 400
    pairs: Counter[tuple[int, int]] = Counter()
    drafted_from: Counter[str] = Counter()
    for seed in range(n):
        events = generate(
            runtime.target_side,
            runtime.drafter_for(DrafterKind.NGRAM),
            prompt,
            GenerationParams(sampler=sampler, max_tokens=2, seed=seed),
            depth=DepthControl(4),
            texts=[prediction] if seed % 2 else [],
        )
        tokens: list[int] = []
        for e in events:
            if isinstance(e, Drafted):
                drafted_from.update(e.origins)
            if isinstance(e, Verified):
                tokens += e.committed
        pairs[(tokens[0], tokens[1])] += 1
    assert drafted_from[PREDICTION_NAME] > 0, drafted_from
    cells = []
    for x1 in p1.ids:
        ctx.truncate(0)
        ctx.decode(prompt)
        p2 = distribution(ctx.decode([int(x1)])[0].copy(), [int(x1)], sampler)
        cells += [
            (n * p1.prob(int(x1)) * float(prob2), pairs.get((int(x1), int(x2)), 0))
            for x2, prob2 in zip(p2.ids, p2.probs, strict=True)
        ]
    assert_fits(cells, n, min_dof=3, show=pairs.most_common(8))


@pytest.mark.slow
def test_on_the_demo_pair_a_right_prediction_is_drafted_and_accepted_and_an_unrelated_one_changes_nothing(
    demo_runtime: Runtime,
) -> None:
    runtime = demo_runtime
    code = (
        "def area(width, height):\n    return width * height\n\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n"
    )
    messages = [{"role": "user", "content": f"Repeat this code exactly, in a code block:\n\n{code}"}]
    params = GenerationParams(max_tokens=60)
    prompt = runtime.prompt(messages)
    plain = plain_greedy(
        runtime.target_context, prompt.tokens, params.max_tokens, params.sampler, runtime.target.eog_tokens
    )
    plain_text = b"".join(runtime.target.piece(t) for t in plain if t not in runtime.target.eog_tokens).decode()
    for kind in (DrafterKind.COMPOSITE, DrafterKind.NGRAM):
        right = list(
            runtime.stream(
                prompt, params, drafter=kind, sources=[TextSource(PREDICTION_NAME, plain_text, "prediction")]
            )
        )
        assert_same_or_tie(runtime.target_context, prompt.tokens, plain, reply_tokens(right), params.sampler, kind)
        accepted = sum(
            1
            for e in right
            if isinstance(e, Verified)
            for origin in e.origins[: len(e.accepted)]
            if origin == PREDICTION_NAME
        )
        assert accepted >= len(plain) // 2, (kind, accepted, len(plain))  # most of the reply came from it
        unrelated = list(
            runtime.stream(prompt, params, drafter=kind, sources=[TextSource(PREDICTION_NAME, UNRELATED, "prediction")])
        )
        assert_same_or_tie(runtime.target_context, prompt.tokens, plain, reply_tokens(unrelated), params.sampler, kind)
