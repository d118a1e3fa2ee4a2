"""The drafters, and the seam the loop calls them through (prefill once, one DraftRequest per round)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.drafters import (
    Draft,
    Drafter,
    DraftModelDrafter,
    DraftRequest,
    NgramDrafter,
    NoDrafter,
)
from specchat.core.engine.lookup import lookup_match
from specchat.core.engine.registry import DRAFTERS, head_drafters, make_drafter
from specchat.core.engine.speculative import TargetSide, generate
from specchat.core.types import (
    Drafted,
    DrafterKind,
    Event,
    Finished,
    GenerationParams,
    SamplerParams,
    SpecchatError,
    Verified,
)
from support.events import finished

MODELS = Path(__file__).resolve().parent.parent / "models"


def request(tokens: Sequence[int], k: int, **kwargs: object) -> DraftRequest:
    return DraftRequest(tokens, k, SamplerParams(), np.random.default_rng(0), CancelToken(), **kwargs)  # type: ignore[arg-type]


def test_lookup_finds_the_latest_match_of_the_longest_ngram() -> None:
    seq = np.array([1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3])
    # "1 2 3" occurred twice before; the latest is followed by 4 5 6.
    assert lookup_match(seq, 3, max_ngram=3, min_ngram=1) == ([4, 5, 6], 3)
    assert lookup_match(seq, 10, 3, 1) == ([4, 5, 6, 7, 1, 2, 3], 3)


def test_lookup_falls_back_to_shorter_ngrams_and_may_find_nothing() -> None:
    assert lookup_match(np.array([5, 8, 1, 2, 8]), 2, 3, 1) == ([1, 2], 1)
    assert lookup_match(np.array([1, 2, 3, 4]), 4, 3, 1) == ([], 0)
    assert lookup_match(np.array([7]), 4, 3, 1) == ([], 0)


def test_ngram_drafter_proposes_one_hot_drafts() -> None:
    draft = NgramDrafter().draft(request([1, 2, 3, 4, 1, 2], 2))
    assert draft.tokens == [3, 4]
    assert [q.prob(t) for q, t in zip(draft.q, draft.tokens, strict=True)] == [1.0, 1.0]


class SlowContext:
    """A dense draft context with a 4-token vocabulary whose catch-up and decodes take known time.

    A dense model's memory cuts anywhere, so, like the real context, it saves
    nothing at a checkpoint and never restores one; it records the slots asked for.
    """

    n_ctx = 64
    restored = False
    tried_decodes = 0

    def __init__(self, sync_pause: float, decode_pause: float) -> None:
        self.sync_pause, self.decode_pause = sync_pause, decode_pause
        self.tokens: list[int] = []
        self.checkpoints: list[str] = []

    def extend_to(self, tokens: Sequence[int]) -> int:
        self.tokens = list(tokens)
        return 0

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        time.sleep(self.sync_pause)
        self.tokens = list(tokens)
        return np.array([0.0, 3.0, 1.0, 0.5], dtype=np.float32), len(tokens) - 1

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        time.sleep(self.decode_pause)
        self.tokens.extend(tokens)
        return np.array([[0.0, 3.0, 1.0, 0.5]], dtype=np.float32)

    def checkpoint(self, slot: str) -> None:
        self.checkpoints.append(slot)


def test_draft_model_reports_catch_up_steps_and_sampling_apart() -> None:
    context = SlowContext(sync_pause=0.03, decode_pause=0.02)
    drafter = DraftModelDrafter(context)
    draft = drafter.draft(request([1, 2, 3], 4))
    assert draft.tokens == [1, 1, 1, 1]
    assert draft.sync_seconds is not None and draft.sync_seconds >= 0.03
    assert draft.step_seconds is not None and draft.step_seconds >= 0.02  # 3 decodes after the catch-up
    assert draft.sample_seconds is not None and draft.sample_seconds < draft.step_seconds
    assert context.checkpoints == ["round"]  # drafts decoded one by one: a recurrent draft would save first
    one = drafter.draft(request([1, 2, 3], 1))
    assert one.step_seconds is None and one.sync_seconds is not None  # depth 1: a catch-up, no further step
    assert context.checkpoints == ["round"]  # one draft is decoded by the sync itself: nothing to save


def test_draft_model_prefill_holds_the_prompt_and_saves_it() -> None:
    context = SlowContext(sync_pause=0.0, decode_pause=0.0)
    DraftModelDrafter(context).prefill([4, 5, 6])
    assert context.tokens == [4, 5, 6] and context.checkpoints == ["prompt"]


def test_draft_request_limits_depth_p_min_and_greedy() -> None:
    drafter = DraftModelDrafter(SlowContext(sync_pause=0.0, decode_pause=0.0))
    sampled = SamplerParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)

    def ask(k: int, *, p_min: float = 0.0, greedy: bool = False, tokens: Sequence[int] = (1, 2)) -> Draft:
        return drafter.draft(DraftRequest(tokens, k, sampled, np.random.default_rng(0), CancelToken(), p_min, greedy))

    # The stand-in's q puts e^3 / (1 + e^3 + e + e^0.5) = 0.789 on token 1 at every step.
    assert ask(3, p_min=0.8, greedy=True).tokens == []
    greedy = ask(3, p_min=0.75, greedy=True)
    assert greedy.tokens == [1, 1, 1] and all(q.prob(1) == 1.0 for q in greedy.q)  # the argmax, one-hot q
    assert greedy.probs == pytest.approx([0.789] * 3, abs=1e-3)
    drawn = ask(8)
    assert set(drawn.tokens) != {1} and len(drawn.tokens) == 8  # sampled from q itself
    assert all(q.prob(1) == pytest.approx(0.789, abs=1e-3) for q in drawn.q)
    assert len(ask(8, tokens=range(62)).tokens) == 2  # no further than the context holds


def test_every_entry_makes_a_drafter_of_its_own_kind_or_says_in_one_line_what_it_lacks() -> None:
    """Read from the registry, not a list: each entry on a pair offering every part (stand-ins) makes a drafter
    whose kind is its name and that drafts as the entry says; on a pair offering nothing it is one line. The
    head drafters need real heads (tests/integration/test_head_drafters.py)."""
    assert len({e.name for e in DRAFTERS}) == len(DRAFTERS) and all(e.label_for() for e in DRAFTERS)
    heads = [e.key for e in head_drafters()]
    context = SlowContext(0.0, 0.0)
    for entry in DRAFTERS:
        if entry.name in heads:
            continue
        made = make_drafter(entry.name, context, object())  # type: ignore[arg-type]
        assert made.kind == entry.name and made.can_draft is entry.drafts, entry.name
        if entry.parts:
            with pytest.raises(SpecchatError) as err:
                make_drafter(entry.name, None, None)
            assert "\n" not in str(err.value) and (entry.missing or "has no") in str(err.value)
        else:
            assert make_drafter(entry.name, None, None).kind == entry.name
    for kind, missing in (
        (DrafterKind.DRAFT_MODEL, "no draft model"),
        (DrafterKind.MTP, "no MTP heads"),
        (DrafterKind.COMPOSITE, "needs a draft model, a drafter head or MTP heads"),
        *((kind, f"needs a {kind} head file.*no such head is loaded") for kind in heads),
    ):
        with pytest.raises(SpecchatError, match=missing) as err:
            make_drafter(kind, None, None)
        assert "\n" not in str(err.value)


# --- the seam, on a real (tiny, random-weight) dense model ---------------------------------------------

PROMPT = [1, 17, 33, 9, 52, 8]


@pytest.fixture(scope="module")
def target() -> Iterator[TargetSide]:
    from specchat.core.llama.context import Context
    from specchat.core.llama.model import Model

    model = Model(MODELS / "llama.gguf")
    context = Context(model, n_ctx=256, n_threads=1)
    yield TargetSide(context, frozenset(), model.piece)  # no end token: replies run to max tokens
    context.close()
    model.close()


def reply_tokens(events: Sequence[Event]) -> list[int]:
    return [t for e in events if isinstance(e, Verified) for t in e.committed]


class ScriptedDrafter(Drafter):
    """A new drafter written against the seam alone: it proposes a script, wrong at every third round."""

    kind = DrafterKind.NGRAM

    def __init__(self, script: list[int]) -> None:
        self.script = script
        self.prefilled: list[list[int]] = []
        self.requests: list[DraftRequest] = []

    def prefill(self, tokens: Sequence[int]) -> None:
        self.prefilled.append(list(tokens))

    def draft(self, request: DraftRequest) -> Draft:
        self.requests.append(request)
        done = len(request.tokens) - len(PROMPT)
        guess = self.script[done : done + request.k]
        if len(self.requests) % 3 == 0 and guess:
            guess[-1] = (guess[-1] + 1) % 128
        return Draft(tokens=guess, probs=[1.0] * len(guess))


def test_a_drafter_written_against_the_seam_speculates_losslessly(target: TargetSide) -> None:
    params = GenerationParams(sampler=SamplerParams(repeat_penalty=1.3), max_tokens=24, draft_p_min=0.25)
    plain = reply_tokens(list(generate(target, NoDrafter(), PROMPT, params, depth=DepthControl(0))))
    assert len(plain) == 24
    drafter = ScriptedDrafter(plain)
    seen: list[list[int]] = []
    events = []
    for event in generate(target, drafter, PROMPT, params, depth=DepthControl(4)):
        if isinstance(event, Drafted):
            seen.append(list(drafter.requests[-1].tokens))  # what the request held while the round ran
        events.append(event)
    assert reply_tokens(events) == plain
    assert drafter.prefilled == [PROMPT[:-1]]  # once, with what the target holds
    for i, req in enumerate(drafter.requests):
        done = len(seen[i]) - len(PROMPT)
        assert seen[i] == PROMPT + plain[:done]  # the whole committed sequence
        assert req.k == min(4, 24 - done - 1) and req.sampler is params.sampler
        assert (req.p_min, req.greedy) == (0.25, False)
    stats = finished(events).stats
    rejected = [e for e in events if isinstance(e, Verified) and e.rejected]
    assert isinstance(events[-1], Finished) and stats.rounds == len(drafter.requests) and rejected


class NeverDrafts(Drafter):
    kind = DrafterKind.NONE
    can_draft = False

    def draft(self, request: DraftRequest) -> Draft:
        raise AssertionError("a drafter that cannot draft was asked to")


def test_a_drafter_that_cannot_draft_is_never_asked(target: TargetSide) -> None:
    events = list(generate(target, NeverDrafts(), PROMPT, GenerationParams(max_tokens=6), depth=DepthControl(4)))
    assert [e.depth for e in events if isinstance(e, Verified)] == [0] * 6
    assert finished(events).stats.drafted == 0


def test_a_draft_stops_at_an_end_token_and_where_keep_going_says_so() -> None:
    drafter = DraftModelDrafter(SlowContext(sync_pause=0.0, decode_pause=0.0))
    assert drafter.draft(request([1, 2], 6)).tokens == [1] * 6
    assert drafter.draft(request([1, 2], 6, eog=frozenset({1}))).tokens == [1]  # nothing after an end is kept
    asked: list[list[float]] = []

    def keep_going(tokens: Sequence[int], probs: Sequence[float]) -> bool:
        assert len(tokens) == len(probs)
        asked.append(list(probs))
        return len(probs) < 3

    assert drafter.draft(request([1, 2], 6, keep_going=keep_going)).tokens == [1, 1, 1]
    assert [len(p) for p in asked] == [1, 2, 3] and len(set(asked[-1])) == 1 and 0.7 < asked[-1][0] < 0.9


class ThroughTheEnd(Drafter):
    """Proposes the plain reply's next tokens with an end token spliced in after the first two."""

    kind = DrafterKind.NGRAM

    def __init__(self, script: list[int], end: int) -> None:
        self.script, self.end = script, end

    def draft(self, request: DraftRequest) -> Draft:
        done = len(request.tokens) - len(PROMPT)
        guess = [*self.script[done : done + 2], self.end, *self.script[done + 2 : done + request.k - 1]]
        return Draft(tokens=guess[: request.k], probs=[1.0] * min(len(guess), request.k))


def test_the_loop_never_verifies_drafts_after_an_end_token(target: TargetSide) -> None:
    params = GenerationParams(max_tokens=12)
    plain = reply_tokens(list(generate(target, NoDrafter(), PROMPT, params, depth=DepthControl(0))))
    end = 127  # an end token the target does not write here: every spliced one is rejected
    assert end not in plain
    ended = TargetSide(target.context, frozenset({end}), target.piece)
    events = list(generate(ended, ThroughTheEnd(plain, end), PROMPT, params, depth=DepthControl(6)))
    drafted = [e.tokens for e in events if isinstance(e, Drafted)]
    assert drafted and all(d[-1] == end and len(d) == 3 for d in drafted if len(d) > 2)
    assert reply_tokens(events) == plain


def test_a_timing_step_decodes_one_token_of_the_catch_up_in_a_real_draft_context() -> None:
    from specchat.core.llama.context import Context
    from specchat.core.llama.model import Model

    model = Model(MODELS / "llama.gguf")
    context = Context(model, n_ctx=64, n_threads=1)
    try:
        drafter = DraftModelDrafter(context)
        drafter.prefill(PROMPT)
        text = PROMPT + [5, 6, 7, 8, 9, 10]
        assert drafter.behind(text) == 4
        seconds = drafter.time_step(text)
        assert seconds is not None and seconds > 0.0
        assert context.tokens == text[: len(PROMPT) + 1] and drafter.behind(text) == 3
        assert drafter.time_step(text[: len(PROMPT) + 3]) is None  # a round's usual catch-up: nothing to time
        assert context.tokens == text[: len(PROMPT) + 1]
    finally:
        context.close()
        model.close()
