"""The composite judged by what its rounds realise: arms retried within a bound, a losing choice abandoned.

The model of costs is misled on purpose here (as a busy machine misleads it): a
draft model it believes cheap is slow, or a prompt read it believes prohibitive
is cheap. The rounds' own timings must win.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.composite import READ_RETRY_REPLIES, RETRY_EVERY, CompositeDrafter, tuning
from specchat.core.engine.composite.timings import ModelTimings
from specchat.core.engine.composite.tuning import TIMING_CLIP, TIMING_DECAY
from specchat.core.engine.depth import AdaptiveDepth
from specchat.core.engine.drafters import Draft, DraftModelDrafter, DraftRequest, base, draft_model
from specchat.core.engine.realised import FACTOR_RANGE, MIN_ROUNDS, RECENT_ROUNDS, RealisedCosts
from specchat.core.types import DraftSource, SamplerParams

VOCAB = 50


class Clock:
    """Seconds that pass only when a part of the test says they do: a busy machine cannot stretch them."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pass_(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """One clock for the composite, the draft model drafter's own timings and the test's target."""
    fake = Clock()
    monkeypatch.setattr(f"{draft_model.__name__}.time.perf_counter", fake)
    monkeypatch.setattr(f"{base.__name__}.time.perf_counter", fake)
    yield fake


class TruthContext:
    """A dense draft context whose next token is always ``truth``'s (the target's), each decode taking ``pause``."""

    n_ctx = 4096
    restored = False
    tried_decodes = 0

    def __init__(self, truth: list[int], clock: Clock, pause: float = 0.0) -> None:
        self.truth, self.clock, self.pause = truth, clock, pause
        self.tokens: list[int] = []
        self.reads = 0
        self.trying = False  # decodes run on a thread count the tuner is trying: ten times as slow

    def _pass(self) -> None:
        self.clock.pass_(self.pause * (10 if self.trying else 1))
        self.tried_decodes += self.trying

    def _logits(self) -> np.ndarray:
        row = np.zeros(VOCAB, dtype=np.float32)
        row[self.truth[len(self.tokens)]] = 8.0
        return row

    def extend_to(self, tokens: Sequence[int]) -> int:
        self.reads += 1
        self._pass()
        self.tokens = list(tokens)
        return 0

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        self._pass()
        self.tokens = list(tokens)
        return self._logits(), len(tokens) - 1

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        self._pass()
        self.tokens.extend(tokens)
        return self._logits()[None, :]

    def checkpoint(self, slot: str) -> None:
        pass


def run(
    drafter: CompositeDrafter,
    clock: Clock,
    truth: list[int],
    prompt: int,
    rounds: int | None,
    *,
    target_pass: float = 0.002,
    per_token: float = 0.0002,
    front_end: float = 0.0,
    length: int | None = None,
    tried: Sequence[int] = (),
) -> list[str]:
    """Drive ``rounds`` rounds as the engine's loop does, against a target that commits ``truth`` (the drafts it
    agrees with and one token more), its verify taking ``target_pass`` and ``per_token`` a draft, and a front end
    that takes ``front_end`` seconds over every round's drafts (a cost no timing of the model of costs sees).
    The round costs are measured as the loop measures them; with ``length``, rounds run until the reply has that
    many tokens, each asked with the tokens left. In the rounds numbered in ``tried`` (from 0) every decode runs on
    a thread count the tuner is trying, ten times as slow, and the next round is told its verify pass did.
    Returns each round's arm (plain, lookup or model)."""
    rng = np.random.default_rng(0)
    adaptive = AdaptiveDepth()
    for _ in range(3):  # the loop's first plain rounds, which measure the target's one-token pass
        adaptive.observe(0, 0, None, target_pass)
    tokens = truth[:prompt]
    drafter.prefill(tokens[:-1])
    arms: list[str] = []
    while (rounds is None or len(arms) < rounds) and (length is None or len(tokens) - prompt < length):
        left = 1000 if length is None else length - (len(tokens) - prompt)
        trying = len(arms) in tried
        context = getattr(drafter.model, "context", None)
        if isinstance(context, TruthContext):
            context.trying = trying
        draft = drafter.draft(
            DraftRequest(
                tokens,
                8,
                SamplerParams(),
                rng,
                CancelToken(),
                costs=adaptive.costs,
                remaining=left,
                previous_tried=len(arms) - 1 in tried,
            )
        )
        if draft.tokens:
            clock.pass_(front_end)
        verify = (target_pass + per_token * len(draft.tokens)) * (10 if trying else 1)
        clock.pass_(verify)
        kept = 0
        while kept < len(draft.tokens) and draft.tokens[kept] == truth[len(tokens) + kept]:
            kept += 1
        timed = not draft.tried
        adaptive.observe(
            len(draft.tokens),
            kept,
            draft.step_seconds if timed else None,
            None if trying else verify,
            0.0,
            draft.sync_seconds if timed else None,
            draft.sample_seconds if timed else None,
        )
        tokens = truth[: len(tokens) + kept + 1]
        sources = set(draft.sources)
        arms.append("model" if DraftSource.MODEL in sources else "lookup" if sources else "plain")
    return arms


def test_factors_count_only_recent_rounds_need_a_few_and_are_bounded() -> None:
    costs = RealisedCosts()
    costs.record("model", 1, 0.010, 0.030)
    assert costs.factor("model", 1) is None  # one round says little
    costs.record("model", 2, 0.010, 0.010)
    assert costs.factor("model", 2) == 1.0  # one slow round of two: a stall, not what the arm costs
    costs.record("model", 3, 0.010, 0.020)
    assert costs.factor("model", 3) == 2.0  # the median round: 20 ms where 10 were predicted
    costs.record("model", 4, 0.010, 0.040)
    assert costs.factor("model", 4) == 2.0  # of four, the lower middle one: still 2
    assert costs.factor("model", 4 + RECENT_ROUNDS + 1) is None  # too old to count now
    assert costs.last("model") == 4 and costs.last("plain") is None
    costs.record("plain", 3, 0.001, 5.0)
    costs.record("plain", 4, 0.001, 5.0)  # two stalls
    assert costs.factor("plain", 4) == FACTOR_RANGE[1]
    assert MIN_ROUNDS == 2


def test_drafting_that_costs_more_than_the_model_of_costs_sees_gives_way_to_plain_rounds_and_is_retried(
    clock: Clock,
) -> None:
    """Every draft right and the model quick, but each drafted round holds the front end 80 ms (a busy window
    drawing the drafts): nine tokens in about 85 ms where a plain round commits one in 2 ms."""
    truth = [int(t) for t in np.random.default_rng(1).integers(0, VOCAB, 4000)]
    drafter = CompositeDrafter(DraftModelDrafter(TruthContext(truth, clock, pause=0.0002)), clock=clock)
    arms = run(drafter, clock, truth, prompt=40, rounds=100, front_end=0.08)
    assert "model" in arms[:3]  # the model of costs' choice while nothing else was timed
    factor = drafter.realised.factor("model", drafter._round)
    assert factor is not None and factor > 4  # its rounds took far longer than predicted
    assert arms[-40:].count("plain") >= 28, arms  # priced by what they took, plain rounds win
    model_rounds = [n for n, a in enumerate(arms) if a == "model"]
    gaps = [b - a for a, b in zip(model_rounds, model_rounds[1:], strict=False)]
    assert gaps and max(gaps) <= RETRY_EVERY + 1  # the model is still tried within the bound


def test_without_hidden_costs_the_factors_stay_near_one_and_the_model_keeps_drafting(clock: Clock) -> None:
    truth = [int(t) for t in np.random.default_rng(3).integers(0, VOCAB, 4000)]
    drafter = CompositeDrafter(DraftModelDrafter(TruthContext(truth, clock, pause=0.0002)), clock=clock)
    arms = run(drafter, clock, truth, prompt=40, rounds=60)
    assert arms[-30:].count("model") >= 24, arms
    factor = drafter.realised.factor("model", drafter._round)
    assert factor is not None and factor < 2


def test_rounds_decoded_on_a_tried_thread_count_teach_the_composite_no_cost(clock: Clock) -> None:
    """The thread tuner's tries run a few decodes on another count, ten times as slow here: the model's timings and
    the arms' realised factors stay as the other rounds make them, and drafting goes on."""
    truth = [int(t) for t in np.random.default_rng(3).integers(0, VOCAB, 4000)]
    drafter = CompositeDrafter(DraftModelDrafter(TruthContext(truth, clock, pause=0.0002)), clock=clock)
    run(drafter, clock, truth, prompt=40, rounds=30)
    step, fixed, factor = drafter.timings.step, drafter.timings.fixed, drafter.realised.factor("model", drafter._round)
    arms = run(drafter, clock, truth, prompt=400, rounds=30, tried=range(10, 16))
    assert drafter.timings.step == pytest.approx(step) and drafter.timings.fixed == pytest.approx(fixed)
    assert drafter.realised.factor("model", drafter._round) == pytest.approx(factor)
    assert arms[16:].count("model") >= 12, arms


def test_a_model_kept_out_by_a_read_priced_as_prohibitive_is_tried_and_kept_when_it_realises_more(
    clock: Clock,
) -> None:
    """Issue 36's busy machine: the model's prompt read was priced so dear that reply after reply went without it,
    while the lookups drafted instead kept missing."""
    rng = np.random.default_rng(2)
    truth = [int(t) for t in rng.integers(0, VOCAB, 4000)]
    context = TruthContext(truth, clock, pause=0.0005)
    drafter = CompositeDrafter(DraftModelDrafter(context), clock=clock)
    drafter.timings.fixed = drafter.timings.step = 0.3
    drafter.timings.read_token = 1e6  # a token's read believed to cost a million passes
    replies = [run(drafter, clock, truth, prompt=400 + 100 * i, rounds=40) for i in range(READ_RETRY_REPLIES + 1)]
    for arms in replies[:READ_RETRY_REPLIES]:
        assert "model" not in arms  # a read is a reply's one-off cost: not forced in every reply
    arms = replies[-1]
    first_model = arms.index("model")
    assert first_model <= RETRY_EVERY + 1, arms  # then tried within the bound
    assert context.reads == 1  # read once, when first tried
    assert arms[first_model:].count("model") >= 0.8 * len(arms[first_model:]), arms


def test_one_stalled_draft_moves_the_model_s_timings_a_little_and_a_lasting_slowdown_within_a_few_rounds() -> None:
    unit = 0.010  # a one-token pass

    def drafted(sync: float, step: float) -> Draft:
        return Draft(tokens=[1, 2], step_seconds=step, sync_seconds=sync, sample_seconds=0.0)

    timings = ModelTimings()
    timings.drafted(drafted(0.010, 0.010), 0.020, unit)
    assert timings.fixed == timings.step == 1.0
    timings.drafted(drafted(0.300, 0.300), 0.600, unit)  # a time slice lost: thirty passes' worth
    assert timings.fixed is not None and timings.step is not None
    assert timings.fixed <= 1.0 + (1 - TIMING_DECAY) * (TIMING_CLIP - 1.0) + 1e-9
    assert timings.step <= 1.0 + (1 - TIMING_DECAY) * (TIMING_CLIP - 1.0) + 1e-9
    for _ in range(8):  # the machine stays three times slower
        timings.drafted(drafted(0.030, 0.030), 0.060, unit)
    assert timings.fixed > 2.5 and timings.step > 2.5


def test_a_step_a_stall_left_dear_comes_down_in_rounds_of_one_draft() -> None:
    """Stalled steps leave the step dear, so rounds draft one token each, which times no step: the first draft,
    which decodes and draws too, bounds it, and the step comes down to it within a dozen such rounds."""
    unit = 0.010

    def drafted(n: int, step: float | None) -> Draft:
        return Draft(tokens=list(range(n)), step_seconds=step, sync_seconds=0.012, sample_seconds=0.0)

    timings = ModelTimings()
    timings.drafted(drafted(2, 0.010), 0.022, unit)
    for _ in range(4):  # a busy spell: steps of 300 ms, each counted at most TIMING_CLIP times the average
        timings.drafted(drafted(2, 0.300), 0.312, unit)
    assert timings.step is not None and timings.fixed is not None and timings.step > 2 * timings.fixed
    for _ in range(12):
        timings.drafted(drafted(1, None), 0.012, unit)
    assert timings.step <= 1.2 * timings.fixed


class ReadingTruth(TruthContext):
    """A :class:`TruthContext` whose prompt reads take ``per_token`` seconds a token, as the model of costs prices
    them."""

    def __init__(self, truth: list[int], clock: Clock, per_token: float) -> None:
        super().__init__(truth, clock, pause=0.0002)
        self.per_token = per_token

    def extend_to(self, tokens: Sequence[int]) -> int:
        self.clock.pass_(len(tokens) * self.per_token)
        return super().extend_to(tokens)


def reply_with_reads(clock: Clock, *, copies: bool, length: int, margin: float) -> tuple[str, int, float, float]:
    """One reply of ``length`` tokens after a 120-token prompt, its rounds driven as the engine's loop drives them,
    by a composite whose model drafts every token right, quick to draft but dear to read: its expected saving over
    the reply covers the read between once and three times. ``copies``: from its fourth token the reply copies
    100 tokens of the prompt. Returns the rounds' arms (p, l, m: plain, lookup, model), the model's reads, the
    reply's seconds and the read's price (seconds)."""
    prompt, target_pass = 120, 0.002
    truth = [int(t) for t in np.random.default_rng(5).integers(0, VOCAB, 4000)]
    if copies:
        truth[prompt + 3 : prompt + 103] = truth[10:110]
    read_token = 0.4  # target passes a token
    context = ReadingTruth(truth, clock, read_token * target_pass)
    drafter = CompositeDrafter(DraftModelDrafter(context), clock=clock)
    drafter.timings.fixed = drafter.timings.step = 0.05
    drafter.timings.catch_up = 0.01
    drafter.timings.read_token = read_token
    for _ in range(10):
        drafter.table.record_span(DraftSource.MODEL, 0, 0, 8, 8)
    started = clock.now
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tuning, "READ_MARGIN", margin)
        arms = run(drafter, clock, truth, prompt, None, target_pass=target_pass, per_token=0.0001, length=length)
    return "".join(arm[0] for arm in arms), context.reads, clock.now - started, (prompt - 1) * read_token * target_pass


def test_a_reply_that_copies_its_prompt_does_not_pay_a_read_whose_saving_was_in_doubt(clock: Clock) -> None:
    """The model's expected saving covers its read, but by less than READ_MARGIN times: rounds go without it, and
    once the reply reaches the copied text the lookups carry it. Read at once (the rule before), the model costs
    the reply three times as long."""
    arms, reads, seconds, _ = reply_with_reads(clock, copies=True, length=100, margin=3.0)
    eager_arms, eager_reads, eager_seconds, _ = reply_with_reads(clock, copies=True, length=100, margin=1.0)
    assert eager_reads == 1 and eager_arms[1] == "m"  # the saving alone: read in the second round
    assert reads == 0 and "m" not in arms and arms.count("l") >= 8, arms
    assert seconds < 0.5 * eager_seconds


def test_a_reply_that_needs_the_model_reads_once_its_rounds_without_it_have_lost_about_the_read(
    clock: Clock,
) -> None:
    """Nothing to copy: the rounds without the model lose against it until the loss reaches the read's price; then
    it reads and drafts. Waiting cost about the read, no more (a rent-or-buy bound)."""
    arms, reads, seconds, read = reply_with_reads(clock, copies=False, length=200, margin=3.0)
    _, eager_reads, eager_seconds, _ = reply_with_reads(clock, copies=False, length=200, margin=1.0)
    first = arms.index("m")
    assert reads == eager_reads == 1 and first > 10, arms
    assert arms[first:].count("m") >= 0.8 * len(arms[first:]), arms
    assert eager_seconds < seconds <= eager_seconds + 1.2 * read


def test_a_model_slower_than_the_target_is_kept_out_by_its_timings_and_timed_back_in_when_quick(
    clock: Clock,
) -> None:
    """A busy machine: a draft step takes twice a target pass, so no model round can win, however right its
    drafts. Probes and tries would each pay a catch-up on every token since the model last drafted; instead one
    decode of that catch-up is timed, RETRY_EVERY rounds after the model last drafted and then at doubling
    intervals up to STEP_EVERY_MAX. When the machine is quick again, the next such timing brings it back."""
    truth = [int(t) for t in np.random.default_rng(4).integers(0, VOCAB, 4000)]
    context = TruthContext(truth, clock, pause=0.004)
    drafter = CompositeDrafter(DraftModelDrafter(context), clock=clock)
    steps: list[int] = []
    time_step = drafter.model.time_step

    def counted(tokens: Sequence[int]) -> float | None:
        steps.append(drafter._round)
        return time_step(tokens)

    drafter.model.time_step = counted  # type: ignore[method-assign]
    arms = run(drafter, clock, truth, prompt=40, rounds=300)
    assert 1 <= arms[:15].count("model") <= 3, arms  # timed while nothing else was (a first draft, then a step)
    assert "model" not in arms[15:], arms  # then no probe, no try
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False)]
    assert steps[0] <= 15 + RETRY_EVERY and gaps[:2] == [2 * RETRY_EVERY, 4 * RETRY_EVERY], steps
    assert max(gaps) == tuning.STEP_EVERY_MAX, steps
    context.pause = 0.0001  # the load is gone; the next reply follows on
    arms = run(drafter, clock, truth, prompt=drafter._reply_seen, rounds=2 * tuning.STEP_EVERY_MAX)
    first = arms.index("model")
    assert first <= tuning.STEP_EVERY_MAX + 2, arms  # at its next timing step, and a probe after it
    assert arms[first:].count("model") >= 0.8 * len(arms[first:]), arms
