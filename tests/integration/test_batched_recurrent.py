"""Several sequences in one target batch on hybrid and recurrent targets: each keeps its own rollback.

On the small random-weight test models (tests/models): ``qwen35`` (attention
+ Gated DeltaNet, rolls back in place with llama.cpp's per-sequence
snapshots), the same with two snapshots only (deeper cuts restore a saved
state), ``granitehybrid`` (attention + Mamba-2, no snapshots: every cut
restores a checkpoint) and ``mamba2`` (recurrent only). A scripted drafter
proposes each reply's plain greedy continuation with a wrong token spliced
in at a place that moves round by round, so nearly every round takes drafts
back, by different depths in different sequences. Sequences join at
different rounds, one is cancelled midway, and every reply is compared with
plain greedy decoding of its prompt alone (a difference only at a float
tie, support/identity.py). At temperature > 0 the exact rule holds per
sequence (a chi-square test of the first two tokens).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.batched import BatchedEngine
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.drafters import Draft, Drafter, DraftRequest
from specchat.core.llama.context import Context
from specchat.core.llama.model import Model, ModelKind
from specchat.core.llama.multi_context import MultiContext, check_batchable
from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import (
    MAX_DEPTH,
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    SamplerParams,
    Verified,
)
from support.batch_runs import run_all
from support.identity import assert_same_or_tie, plain_greedy
from support.stats import assert_pairs_follow_the_target, batched_pairs

MODELS = Path(__file__).resolve().parent.parent / "models"
PENALTY = SamplerParams(repeat_penalty=1.3)  # keeps the random models' replies from collapsing into one token
# (architecture, snapshots asked of llama.cpp): in place, in place or restored by depth, restored, recurrent only.
TARGETS = [("qwen35", MAX_DEPTH), ("qwen35", 2), ("granitehybrid", MAX_DEPTH), ("mamba2", MAX_DEPTH)]
PROMPTS = [
    [1, 5, 9, 22, 40, 7, 5, 9, 22, 40],
    [1, 3, 3, 8, 60, 61, 62, 3, 8, 60],
    [1, 90, 91, 92, 93, 94, 95, 90, 91],
    [1, 17, 18, 19, 20, 17, 18, 19, 20, 17, 18],
]


class WrongAtTimes(Drafter):
    """Proposes the plain greedy reply's next tokens with one wrong token, at a place that moves each round."""

    kind = DrafterKind.NGRAM.value

    def __init__(self, prompt: Sequence[int], plain: Sequence[int], vocab: int) -> None:
        self.prompt, self.plain, self.vocab = list(prompt), list(plain), vocab
        self.rounds = 0

    def draft(self, request: DraftRequest) -> Draft:
        done = len(request.tokens) - len(self.prompt)
        guess = self.plain[done : done + request.k]
        self.rounds += 1
        if guess and self.rounds % 4:  # every fourth round all right: a round that keeps its whole draft
            wrong = (self.rounds * 5) % len(guess)
            guess[wrong] = (guess[wrong] + 1 + self.rounds % 7) % self.vocab
        return Draft(tokens=guess, probs=[1.0] * len(guess))


@pytest.fixture(scope="module", params=TARGETS, ids=[f"{a}-rs{r}" for a, r in TARGETS])
def target(request: pytest.FixtureRequest) -> Iterator[tuple[Context, MultiContext]]:
    arch, rollback = request.param
    model = Model(MODELS / f"{arch}.gguf")
    lone = Context(model, n_ctx=256, n_threads=1, rollback=rollback)
    multi = MultiContext(model, n_seq=3, n_ctx=256, n_threads=1, rollback=rollback)
    yield lone, multi
    multi.close()
    lone.close()
    model.close()


def test_interleaved_sequences_with_rejected_drafts_each_match_their_lone_decode(
    target: tuple[Context, MultiContext],
) -> None:
    lone, multi = target
    model = multi.model
    assert model.kind is not ModelKind.DENSE
    engine = BatchedEngine(multi, frozenset(), model.piece, verify_budget=24)  # no end token: replies run out
    # (prompt, fixed depth, round it joins at, tokens): three at first (every slot), the fourth joins once the
    # cancelled one has left its slot.
    plan = [(PROMPTS[0], 5, 0, 40), (PROMPTS[1], 2, 0, 36), (PROMPTS[2], 7, 0, 40), (PROMPTS[3], 4, 6, 30)]
    plains = [plain_greedy(lone, p, n, PENALTY) for p, _, _, n in plan]
    cancel_index, cancel_after = 2, 4  # the third sequence is cancelled after its fourth round
    cancels = [CancelToken() for _ in plan]
    keys: dict[int, int] = {}
    tokens: dict[int, list[int]] = {}
    ended: dict[int, Finished] = {}
    rejected: Counter[int] = Counter()
    verified: Counter[int] = Counter()
    round_no = 0
    while len(ended) < len(plan):
        for i, (prompt, depth, joins, n) in enumerate(plan):
            if joins == round_no:
                drafter = WrongAtTimes(prompt, plains[i], model.n_vocab)
                params = GenerationParams(sampler=PENALTY, max_tokens=n)
                key, early = engine.admit(prompt, params, drafter, depth=DepthControl(depth), cancel=cancels[i])
                assert early is None
                keys[key], tokens[i] = i, []
        restarts = sum(s.restarts for s in multi.stats)  # a new prompt in a used slot may start it afresh
        events: list[tuple[int, Event]] = engine.step()
        assert sum(s.restarts for s in multi.stats) == restarts  # no cut in a round fell back to the prompt
        for key, event in events:
            i = keys[key]
            assert i not in ended, "an event after the sequence's Finished"
            if isinstance(event, Verified):
                tokens[i].extend(event.committed)
                rejected[i] += bool(event.rejected)
                verified[i] += 1
                if i == cancel_index and verified[i] == cancel_after:
                    cancels[i].cancel()
            elif isinstance(event, Finished):
                ended[i] = event
        round_no += 1
        assert round_no < 200
    assert engine.active == 0 and engine.widest == 3
    assert ended[cancel_index].reason is FinishReason.CANCELLED and verified[cancel_index] == cancel_after
    stats = multi.stats
    cuts = Counter(in_place=sum(s.in_place for s in stats), restores=sum(s.restores for s in stats))
    if multi.rollback_depth >= MAX_DEPTH:
        assert cuts["restores"] == 0 and cuts["in_place"] > 0, cuts
    elif multi.rollback_depth > 0:
        assert cuts["restores"] > 0 and cuts["in_place"] > 0, cuts  # short cuts in place, deeper ones restored
        # The sequence drafting 2 deep (slot 1: free slots go lowest first) cuts in place every round, also in
        # rounds where another slot restored and decoded its kept drafts again (after every cut was made).
        assert stats[1].restores == 0 and stats[1].in_place > 0, stats[1]
    else:
        assert cuts["in_place"] == 0 and cuts["restores"] > 0, cuts
    # Each restore starts from the state saved just before its round: it decodes again at most that round's drafts.
    assert sum(s.replayed_tokens for s in stats) <= 7 * cuts["restores"], stats
    for i, (prompt, _, _, n) in enumerate(plan):
        got = tokens[i]
        assert rejected[i] >= verified[i] // 2, (i, rejected[i], verified[i])  # drafts were taken back
        plain = plains[i]
        if i == cancel_index:
            assert 0 < len(got) < n
            plain = plain[: len(got)]
        else:
            assert ended[i].reason is FinishReason.MAX_TOKENS and len(got) == n
        assert_same_or_tie(lone, prompt, plain, got, PENALTY, label=f"{model.arch} sequence {i}")


def test_a_cut_in_one_slot_leaves_the_others_state_untouched(target: tuple[Context, MultiContext]) -> None:
    lone, multi = target
    a, b = PROMPTS[0], PROMPTS[1]
    sa, sb = multi.acquire(a), multi.acquire(b)
    try:
        multi.extend_to(sa, a[:-1])
        multi.extend_to(sb, b[:-1])
        multi.checkpoint(sa, "prompt")
        multi.checkpoint(sb, "prompt")
        for slot in (sa, sb):
            multi.prepare_rollback(slot, 6)
        multi.step([(sa, [a[-1], 11, 12, 13, 14, 15, 16]), (sb, [b[-1], 21, 22])])
        multi.truncate(sa, len(a) + 1)  # five drafts taken back in sa alone; sb keeps its three
        assert multi.tokens[sa] == [*a, 11] and multi.tokens[sb] == [*b, 21, 22]
        rows = multi.step([(sa, [77]), (sb, [78])])
        for prompt, tail, got in ((a, [11, 77], rows[0]), (b, [21, 22, 78], rows[1])):
            lone.truncate(0)
            ref = lone.decode([*prompt, *tail])
            scale = float(np.abs(ref).max())
            assert np.abs(got[-1] - ref[0]).max() < 1e-3 * scale
        # Both cut in one round: what must be decoded again is held back to the end, then decoded together.
        for slot in (sa, sb):
            multi.prepare_rollback(slot, 4)
        multi.step([(sa, [31, 32, 33, 34]), (sb, [41, 42])])
        with multi.replays_together():
            multi.truncate(sa, len(a) + 3)
            multi.truncate(sb, len(b) + 4)
        assert multi.tokens[sa] == [*a, 11, 77, 31] and multi.tokens[sb] == [*b, 21, 22, 78, 41]
        rows = multi.step([(sa, [5]), (sb, [6])])
        for prompt, tail, got in ((a, [11, 77, 31, 5], rows[0]), (b, [21, 22, 78, 41, 6], rows[1])):
            lone.truncate(0)
            ref = lone.decode([*prompt, *tail])
            scale = float(np.abs(ref).max())
            assert np.abs(got[-1] - ref[0]).max() < 1e-3 * scale
    finally:
        for slot in (sa, sb):
            multi.clear(slot)
            multi.release(slot)


def test_hybrid_and_recurrent_targets_are_batchable() -> None:
    for arch in ("lfm2", "qwen35", "granitehybrid", "mamba2"):
        model = Model(MODELS / f"{arch}.gguf", vocab_only=True)
        try:
            assert model.kind is not ModelKind.DENSE
            check_batchable(model)  # these bindings save one sequence's state: nothing refused
        finally:
            model.close()


@pytest.mark.parametrize("arch", ["qwen35", "granitehybrid", "mamba2"])
def test_sampling_follows_the_target_per_sequence(arch: str) -> None:
    """The first two tokens of many seeded replies, four at a time in one batch, against the exact joint."""
    runtime = Runtime(Model(MODELS / f"{arch}.gguf"), None, n_ctx=256, n_threads=1)
    batched = BatchedRuntime(runtime, 4, verify_budget=16)
    try:
        sampler = SamplerParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
        prompt = PROMPTS[0]  # ends in a repeat: lookup drafts from the first round
        n = 200
        pairs, drafted = batched_pairs(batched, prompt, sampler, n, 4, "ngram")
        assert drafted > 0
        stats = batched.contexts.stats
        assert sum(s.in_place + s.restores for s in stats) > 0  # drafts were taken back in the batch
        assert_pairs_follow_the_target(runtime.target_context, prompt, sampler, pairs, n)
    finally:
        batched.close()
        runtime.close()


@pytest.mark.parametrize("arch", ["qwen35", "granitehybrid", "mamba2"])
def test_a_turn_reuses_its_slot_and_a_prompt_overwritten_comes_back_from_the_prompt_cache(arch: str) -> None:
    runtime = Runtime(Model(MODELS / f"{arch}.gguf"), None, n_ctx=256, n_threads=1)
    two = BatchedRuntime(runtime, 2, verify_budget=8)
    try:
        params = GenerationParams(sampler=PENALTY, max_tokens=8)
        first = [1, *range(20, 60)]
        key, _ = two.admit(first, params, drafter="ngram")
        reply = run_all(two)[key][0]
        turn = [*first, *reply, 44, 45]
        key, _ = two.admit(turn, params, drafter="ngram")  # the slot holding the first turn goes on from it
        got, finished = run_all(two)[key]
        assert finished.stats.reused_prompt_tokens >= len(first) + len(reply) - 1
        lone = runtime.target_context
        assert_same_or_tie(lone, turn, plain_greedy(lone, turn, 8, PENALTY), got, PENALTY, label="next turn")
        for other in ([1, *range(70, 100)], [1, *range(100, 125)]):  # both sequences read something else
            two.admit(other, params, drafter="none")
        run_all(two)
        # A recurrent state cannot be cut back: the kept state of use is the one the next turn extends.
        third = [*turn, *got, 46, 47]
        key, _ = two.admit(third, params, drafter="ngram")
        last, finished = run_all(two)[key]
        assert finished.stats.reused_prompt_tokens >= len(turn)  # the kept state loaded back, not read again
        assert_same_or_tie(lone, third, plain_greedy(lone, third, 8, PENALTY), last, PENALTY, label="loaded back")
    finally:
        two.close()
        runtime.close()
