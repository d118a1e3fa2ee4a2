"""The thread count each decode uses: measured and chosen (ThreadTuner), alone and in a real llama.cpp context."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from specchat.core.llama import threads
from specchat.core.llama.context import Context
from specchat.core.llama.model import Model
from specchat.core.llama.threads import ThreadTuner

MODELS = Path(__file__).resolve().parents[1] / "models"


def drive(tuner: ThreadTuner, seconds: dict[int, float], decodes: int, n_tokens: int = 1) -> list[int]:
    """Decode ``decodes`` times, each count taking ``seconds[count]``; the counts used, in order."""
    used = []
    for _ in range(decodes):
        count = tuner.choose(n_tokens)
        tuner.observe(count, n_tokens, seconds[count])
        used.append(count)
    return used


def test_a_count_given_is_kept() -> None:
    tuner = ThreadTuner((2,))
    assert drive(tuner, {2: 0.01}, 300) == [2] * 300
    assert tuner.tries == 0


def test_a_faster_count_takes_over_after_its_first_try_and_gives_way_when_the_machine_changes() -> None:
    tuner = ThreadTuner((2, 1))
    used = drive(tuner, {2: 0.050, 1: 0.020}, threads.FIRST_TRY + threads.TRY_DECODES + 10)
    assert used[: threads.FIRST_TRY] == [2] * threads.FIRST_TRY
    assert tuner.current == 1 and used[-10:] == [1] * 10
    # The machine quietens: two threads are faster again, and the next try finds it.
    used = drive(tuner, {2: 0.010, 1: 0.020}, threads.EXPLORE_EVERY + threads.TRY_DECODES + 10)
    assert tuner.current == 2 and used[-10:] == [2] * 10
    assert tuner.switches == 2


def test_a_slower_count_is_tried_ever_more_rarely_and_a_stalling_try_ends_at_once() -> None:
    tuner = ThreadTuner((2, 1))
    decodes = threads.FIRST_TRY + 7 * threads.EXPLORE_EVERY + 3 * threads.TRY_DECODES
    used = drive(tuner, {2: 0.010, 1: 0.012}, decodes)
    assert tuner.current == 2 and tuner.switches == 0
    starts = [i for i, c in enumerate(used) if c == 1 and (i == 0 or used[i - 1] == 2)]
    assert used.count(1) == 3 * threads.TRY_DECODES  # three tries, each its length, nothing more
    gaps = [b - a - threads.TRY_DECODES for a, b in zip(starts, starts[1:], strict=False)]
    assert gaps == [threads.EXPLORE_EVERY * 2, threads.EXPLORE_EVERY * 4]  # each lost try doubles the wait
    stalling = ThreadTuner((2, 1))
    used = drive(stalling, {2: 0.010, 1: 0.010 * threads.STALL_RATIO / 2}, threads.FIRST_TRY + threads.TRY_DECODES)
    assert used[threads.FIRST_TRY :].count(1) == 2  # the switch's own slow decode, then one more: ended there
    stalled = ThreadTuner((2, 1))
    used = drive(stalled, {2: 0.010, 1: 0.010 * threads.STALL_RATIO * 1.5}, threads.FIRST_TRY + threads.TRY_DECODES)
    assert used[threads.FIRST_TRY :].count(1) == 1  # a first decode that stalls outright ends it at once


def test_a_load_that_arrives_after_lost_tries_is_answered_within_seconds_not_thousands_of_decodes() -> None:
    tuner = ThreadTuner((2, 1))
    # Idle: one thread loses every try, so the next is pushed ever further (up to thousands of decodes).
    drive(tuner, {2: 0.001, 1: 0.0012}, threads.FIRST_TRY + 15 * threads.EXPLORE_EVERY)
    assert tuner.current == 2 and tuner._until_try > threads.EXPLORE_EVERY
    # Two busy processes arrive: two threads now take 3 s a decode, one thread 0.2 s.
    used = drive(tuner, {2: 3.0, 1: 0.2}, 20)
    stalled = used.index(1)
    assert stalled * 3.0 <= threads.TRY_SECONDS + 3.0  # tried within TRY_SECONDS of stalled decoding
    assert tuner.current == 1 and used[-5:] == [1] * 5


def test_a_count_that_slows_sharply_is_tried_against_within_a_few_decodes() -> None:
    tuner = ThreadTuner((2, 1))
    drive(tuner, {2: 0.001, 1: 0.0012}, threads.FIRST_TRY + 15 * threads.EXPLORE_EVERY)
    assert tuner._until_try > threads.EXPLORE_EVERY
    # A load arrives: two threads become 40 times slower, far from TRY_SECONDS of decoding in a few decodes.
    used = drive(tuner, {2: 0.040, 1: 0.005}, threads.SLOW_RUN + threads.TRY_DECODES + 5)
    assert used.index(1) <= threads.SLOW_RUN  # tried within the run of slow decodes (here after its first)
    assert tuner.current == 1 and used[-5:] == [1] * 5


def drive_stalling(
    tuner: ThreadTuner,
    decodes: int,
    every: int = 6,
    stall: float = 0.5,
    two: float = 0.035,
    one: float = 0.050,
    stalling: int = 2,
) -> tuple[list[int], float]:
    """Decode ``decodes`` times, two threads taking ``two`` seconds and one thread ``one``, but the count
    ``stalling`` ``stall`` seconds every ``every``-th decode of its own; the counts used, and the seconds it all
    took."""
    used: list[int] = []
    total = 0.0
    own = 0
    for _ in range(decodes):
        count = tuner.choose(1)
        seconds = two if count == 2 else one
        if count == stalling:
            own += 1
            seconds = stall if own % every == 0 else seconds
        tuner.observe(count, 1, seconds)
        used.append(count)
        total += seconds
    return used, total


def test_a_count_that_stalls_now_and_then_gives_way_and_is_tried_ever_more_rarely() -> None:
    # Two threads are faster decode by decode, but their stalls make them slower over all: 0.5 s every sixth.
    tuner = ThreadTuner((2, 1))
    used, total = drive_stalling(tuner, 3000)
    assert tuner.current == 1
    # Each return to two threads (a try it wins, its stalls not showing in five decodes) lasts until it stalls
    # again, and the waits before those returns grow as lost tries' do.
    starts = [i for i, c in enumerate(used) if c == 2 and i > 0 and used[i - 1] == 1]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert len(gaps) >= 2 and all(later > earlier for earlier, later in zip(gaps, gaps[1:], strict=False)), gaps
    always_two = (3000 // 6) * 0.5 + (3000 - 3000 // 6) * 0.035
    assert total < 0.6 * always_two  # not far from one thread's 150 s; two threads throughout take about 340 s
    assert total < 1.15 * 3000 * 0.050


def test_stalls_of_one_thread_do_not_keep_trying_two_that_stall_worse() -> None:
    tuner = ThreadTuner((1, 2))  # beside two busy processes: one thread stalls now and then, two far worse
    used, total = drive_stalling(tuner, 4000, every=6, stall=1.0, two=3.0, one=0.05, stalling=1)
    # Stalls of the fewest threads start no try: the tries come by time, ever more rarely (over 800 s here).
    assert tuner.current == 1 and tuner.tries <= 10
    assert used.count(2) <= 2 * tuner.tries and 3.0 * used.count(2) < 0.08 * total


def test_an_idle_machine_s_hiccups_leave_the_faster_count_in_use() -> None:
    # Two threads 10 ms, a hiccup of four times that every twentieth decode; one thread 12 ms.
    tuner = ThreadTuner((2, 1))
    used, total = drive_stalling(tuner, 3000, every=20, stall=0.040, two=0.010, one=0.012)
    assert tuner.current == 2 and used.count(2) > 0.85 * len(used)
    assert total < 1.02 * (150 * 0.040 + 2850 * 0.010)  # what two threads throughout take


def test_a_lasting_slowdown_of_every_count_does_not_keep_trying() -> None:
    tuner = ThreadTuner((2, 1))
    drive(tuner, {2: 0.001, 1: 0.0012}, threads.FIRST_TRY + 3 * threads.EXPLORE_EVERY)
    tries = tuner.tries
    used = drive(tuner, {2: 0.010, 1: 0.012}, 100)  # both ten times slower, two threads still the faster
    assert tuner.current == 2 and tuner.tries - tries <= 2  # a try or two while the average catches up
    assert used.count(1) <= 2 * threads.TRY_DECODES


def test_on_a_busy_machine_a_losing_count_is_tried_ever_more_rarely_by_time_as_well() -> None:
    tuner = ThreadTuner((1, 2))  # started with one thread fewer; two threads stall beside the load
    used = drive(tuner, {1: 0.05, 2: 3.0}, 4000)  # 200 s of decoding
    assert tuner.current == 1
    assert tuner.tries <= 6  # not one every TRY_SECONDS: the wait doubles with each lost try
    assert used.count(2) <= 2 * tuner.tries  # each ended after one or two stalled decodes
    assert sum(3.0 for c in used if c == 2) < 0.15 * sum(0.05 if c == 1 else 3.0 for c in used)


def test_large_batches_that_vary_in_time_do_not_start_a_try() -> None:
    tuner = ThreadTuner((2, 1))
    drive(tuner, {2: 0.001, 1: 0.0012}, threads.FIRST_TRY + 3 * threads.EXPLORE_EVERY)
    tries = tuner.tries
    drive(tuner, {2: 0.010, 1: 0.012}, 3, n_tokens=48)  # a prompt read in chunks
    drive(tuner, {2: 0.200, 1: 0.240}, 5, n_tokens=900)  # then a whole long one: the same bucket
    assert tuner.tries == tries


def test_a_busy_machine_starts_with_one_thread_fewer() -> None:
    assert threads.starting_counts(2, load=0.2) == (2, 1)
    assert threads.starting_counts(2, load=threads.BUSY_LOAD + 0.5) == (1, 2)
    assert threads.starting_counts(8, load=3.0) == (7, 8)
    assert threads.starting_counts(1, load=5.0) == (1,)


def test_one_stall_in_a_try_does_not_decide_it() -> None:
    tuner = ThreadTuner((2, 1))
    drive(tuner, {2: 0.010, 1: 0.010}, threads.FIRST_TRY)
    assert tuner.choose(1) == 1
    for i, seconds in enumerate([0.001, 0.012, 0.011, 0.013, 0.012]):  # one lucky decode, the rest slower
        tuner.observe(1, 1, seconds)
        if i < threads.TRY_DECODES - 1:
            assert tuner.choose(1) == 1
    assert tuner.current == 2


def test_a_stall_of_the_count_in_use_is_clipped() -> None:
    tuner = ThreadTuner((2, 1))
    drive(tuner, {2: 0.010, 1: 0.010}, 4)
    tuner.observe(2, 1, 5.0)  # a neighbour held the core for five seconds
    # The average moved by at most CLIP times itself, not by the stall.
    usual = tuner._seconds[(0, threads.bucket(1))]
    assert usual <= 0.010 * (threads.DECAY + (1 - threads.DECAY) * threads.CLIP) + 1e-12


def test_batch_sizes_are_timed_apart() -> None:
    tuner = ThreadTuner((2, 1))
    assert [threads.bucket(n) for n in (1, 2, 4, 5, 16, 17, 512)] == [0, 1, 1, 2, 2, 3, 3]
    drive(tuner, {2: 0.010, 1: 0.010}, threads.FIRST_TRY, n_tokens=1)
    # A try compares like with like: a batch size the count in use has no time for waits for one.
    assert tuner.choose(8) == 2


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ThreadTuner((2, 0))


@pytest.mark.slow
def test_a_real_context_switches_its_threads_and_decodes_the_same_logits() -> None:
    model = Model(MODELS / "llama.gguf")
    fixed = Context(model, n_ctx=256, n_threads=2)
    tuned = Context(model, n_ctx=256)
    tuned.tuner = ThreadTuner((2, 1))
    prompt = [1, 15, 27, 30, 41]
    fixed.decode(prompt)
    tuned.decode(prompt)
    seen: set[int] = set()
    token = 7
    for _ in range(threads.FIRST_TRY + threads.TRY_DECODES + 4):
        a = fixed.decode([token]).copy()
        b = tuned.decode([token])
        seen.add(int(llama_cpp.llama_n_threads(tuned._ptr)))
        # One thread or two, each row of a product is summed by one thread: the same logits, up to rounding.
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(a).max()))
        token = int(np.argmax(a))
    assert seen == {1, 2}  # llama.cpp decoded with both counts
    assert tuned.tuner.tries >= 1
    assert fixed.tuner.fixed and int(llama_cpp.llama_n_threads(fixed._ptr)) == 2
    fixed.close()
    tuned.close()


def test_a_draft_model_decodes_with_its_target_s_thread_count() -> None:
    """OpenMP's team is the process's: the draft and the target share one tuner, so the team keeps its size."""
    from specchat.core.llama.heads import open_draft

    target = Context(Model(MODELS / "llama.gguf"), n_ctx=128)
    draft, head = open_draft(target, Model(MODELS / "llama-q8.gguf"), n_ctx=128, n_threads=None)
    assert head is None and draft is not None
    assert draft.tuner is target.tuner
    # Each context is timed against its own decodes: a try compares like with like.
    target.decode([1, 2, 3])
    draft.decode([1, 2, 3])
    assert {key for key, _ in target.tuner._seconds} == {id(target), id(draft)}
    given = Context(Model(MODELS / "llama.gguf"), n_ctx=128, n_threads=1)
    fixed, _ = open_draft(given, Model(MODELS / "llama-q8.gguf"), n_ctx=128, n_threads=1)
    assert fixed is not None and fixed.tuner.fixed
    draft.close()
    target.close()
    fixed.close()
    given.close()


def test_a_decode_on_a_tried_count_is_flagged_and_teaches_the_round_costs_nothing() -> None:
    """A try's decodes run on another thread count (one thread took twice as long here): the context says so, and
    a round whose verify pass was one leaves the round-cost model as it was while its acceptance still counts."""
    from specchat.core.engine.depth import AdaptiveDepth

    ctx = Context(Model(MODELS / "llama.gguf"), n_ctx=128, tuner=ThreadTuner((2, 1)))
    ctx.decode([1, 2, 3])
    assert not ctx.tried
    ctx.tuner._trying = 1  # the tuner's next decodes are a try of one thread
    ctx.decode([4, 5])
    assert ctx.tried and int(llama_cpp.llama_n_threads(ctx._ptr)) == 1
    ctx.tuner._trying = None
    ctx.decode([6])
    assert not ctx.tried
    ctx.close()

    # The batched engine's contexts flag a step the same way, and each slot's view says so.
    from specchat.core.llama.multi_context import MultiContext

    multi = MultiContext(Model(MODELS / "llama.gguf"), n_seq=2, n_ctx=128, tuner=ThreadTuner((2, 1)))
    slot = multi.acquire()
    multi.step([(slot, [1, 2, 3])])
    assert not multi.tried and not multi.view(slot).tried
    multi.tuner._trying = 1
    multi.step([(slot, [4])])
    assert multi.tried and multi.view(slot).tried
    multi.close()

    depth = AdaptiveDepth()
    depth.observe(3, 3, 0.004, None, 0.001, 0.006, 0.0005)
    assert not depth.costs.measured_plain() and depth.costs._verify == {} and depth._drafted_rounds == 1
    depth.observe(0, 0, None, 0.02, 0.001)
    assert depth.costs.measured_plain()


def test_a_draft_decoded_on_a_tried_count_says_so_and_its_timings_are_left_out() -> None:
    """The draft model's context shares the tuner's tries: a draft or a timing step that ran (in part) on a tried
    count is flagged (its steps cost what another count costs), and the engine's round costs learn only its
    verify pass."""
    from specchat.core.cancel import CancelToken
    from specchat.core.engine.depth import AdaptiveDepth, DepthControl
    from specchat.core.engine.drafters import Draft, DraftModelDrafter, DraftRequest
    from specchat.core.engine.speculative import TargetSide, generate
    from specchat.core.types import GenerationParams, SamplerParams, Verified

    ctx = Context(Model(MODELS / "llama.gguf"), n_ctx=128, tuner=ThreadTuner((2, 1)))
    drafter = DraftModelDrafter(ctx)
    prompt = [1, 2, 3, 4, 5]

    def draft() -> Draft:
        request = DraftRequest(prompt, 3, SamplerParams(), np.random.default_rng(0), CancelToken(), p_min=0.0)
        return drafter.draft(request)

    tuner = ctx.tuner
    tuner.choose = lambda n_tokens, key=0: tuner.current  # type: ignore[method-assign]
    quiet = draft()
    assert quiet.tokens and not quiet.tried and ctx.tried_decodes == 0
    tuner.choose = lambda n_tokens, key=0: 1  # type: ignore[method-assign]  # every decode a try of one thread
    tried = draft()
    assert tried.tokens and tried.tried and ctx.tried_decodes > 0
    assert drafter.time_step([*prompt, 6, 7, 8, 9]) is None  # a timing step on the tried count says nothing
    tuner.choose = lambda n_tokens, key=0: tuner.current  # type: ignore[method-assign]
    assert drafter.time_step([*prompt, 6, 7, 8, 9, 10, 11]) is not None
    ctx.close()

    # A reply whose every draft decode is a try, the target's decodes on its count in use: the round costs learn
    # the target's verify passes and nothing of the drafting.
    model = Model(MODELS / "llama.gguf")
    target = Context(model, n_ctx=256, tuner=ThreadTuner((2,)))
    draft_ctx = Context(model, n_ctx=256, tuner=ThreadTuner((2, 1)))
    draft_ctx.tuner.choose = lambda n_tokens, key=0: 1  # type: ignore[method-assign]
    adaptive = AdaptiveDepth()
    events = list(
        generate(
            TargetSide(target, frozenset(), model.piece),
            DraftModelDrafter(draft_ctx),
            prompt,
            GenerationParams(max_tokens=16, draft_p_min=0.0),
            depth=DepthControl(3),
            adaptive=adaptive,
        )
    )
    assert any(isinstance(e, Verified) and e.depth == 3 for e in events) and draft_ctx.tried_decodes > 0
    assert adaptive.costs._draft_step is None and adaptive.costs._draft_sync is None
    assert adaptive.costs._verify.get(4, 0.0) > 0.0  # the verify passes of 4 tokens counted
    target.close()
    draft_ctx.close()
