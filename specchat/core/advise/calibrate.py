"""Short greedy runs that measure what the cost model needs, on this machine, within a time budget.

Each run decodes one of three built-in prompts (chat, code, a rewrite) with
a fixed depth that changes every round: every other round drafts the deepest
depth (for per-position acceptance), the rounds between walk through the
shallower ones (for the target's verify cost at every batch size). Greedy
decoding makes the drafts at depth k a prefix of those at any deeper depth,
so acceptance measured at one depth holds at all of them. The engine reports
each round's timings to its depth controller; a recording controller keeps
them as :class:`RoundSample` rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import AdaptiveDepth, DepthControl
from specchat.core.engine.drafters import Drafter
from specchat.core.engine.speculative import TargetSide, generate
from specchat.core.types import Finished, GenerationParams, SamplerParams, SpecchatError, Verified

Progress = Callable[[str, float], None]
"""A line saying what runs now, and the fraction of the budget spent (0..1)."""

CALIBRATION_DEPTH = 8
CALIBRATION_TOKENS = 64
_REWRITE_SOURCE = (
    "The meeting on Tuesday was moved to Thursday because the projector in the small room was broken, "
    "and the team agreed that the budget review would happen first, followed by the plan for the new "
    "office, which still needs a date for the move and a list of the furniture to order."
)
PROMPTS: tuple[tuple[str, str], ...] = (
    ("chat", "What should I pack for a weekend hiking trip? Give a short list with a reason for each item."),
    (
        "code",
        "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring "
        "and two doctest examples.",
    ),
    ("rewrite", f"Rewrite this paragraph in plain, formal English, keeping every fact:\n\n{_REWRITE_SOURCE}"),
)


@dataclass(frozen=True)
class RoundSample:
    """One round as the engine timed it (seconds); ``depth`` is the depth asked for, ``drafted`` what came."""

    depth: int
    drafted: int
    accepted: int
    verify: float
    overhead: float | None = None
    step: float | None = None  # per draft decode after the first
    sync: float | None = None  # the draft's catch-up at the round's start
    sample: float | None = None  # per drafted token: its distribution and draw

    def to_json(self) -> dict[str, object]:
        return {
            "depth": self.depth,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "verify": self.verify,
            "overhead": self.overhead,
            "step": self.step,
            "sync": self.sync,
            "sample": self.sample,
        }


@dataclass
class Measurement:
    """The rounds of one drafter's runs, and the tokens and seconds they took."""

    rounds: list[RoundSample] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    runs: int = 0  # prompts decoded (the last one perhaps cut short by the budget)

    @property
    def drafted_rounds(self) -> int:
        return sum(1 for r in self.rounds if r.depth > 0)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class _Recorder(AdaptiveDepth):
    """A depth controller that also keeps every observation it is given, untouched."""

    def __init__(self) -> None:
        super().__init__()
        # verify None: a round timed on a thread count the tuner was trying (left out of the samples)
        self.observed: list[tuple[int, int, float | None, float | None, float | None, float | None, float | None]] = []

    def observe(
        self,
        n_drafted: int,
        n_accepted: int,
        step_seconds: float | None,
        verify_seconds: float | None,
        overhead_seconds: float | None = None,
        sync_seconds: float | None = None,
        sample_seconds: float | None = None,
    ) -> None:
        self.observed.append(
            (n_drafted, n_accepted, verify_seconds, overhead_seconds, step_seconds, sync_seconds, sample_seconds)
        )
        super().observe(
            n_drafted, n_accepted, step_seconds, verify_seconds, overhead_seconds, sync_seconds, sample_seconds
        )


def depth_schedule(max_depth: int) -> list[int]:
    """The depths a calibration run cycles through: ``[K, 1, K, 2, ..., K, K-1]`` (``[0]`` for plain)."""
    if max_depth <= 0:
        return [0]
    out: list[int] = []
    for k in range(1, max_depth):
        out += [max_depth, k]
    return out or [max_depth]


def run_prompt(
    target: TargetSide,
    drafter: Drafter,
    prompt: Sequence[int],
    *,
    max_depth: int,
    max_tokens: int,
    deadline: float,
    cancel: CancelToken,
    into: Measurement,
) -> Finished:
    """Decode ``prompt`` greedily with the depth schedule, adding its rounds to ``into``.

    The run stops at the next round once ``deadline`` (``time.perf_counter()``) passes or ``cancel`` is set;
    the engine leaves the caches consistent either way.
    """
    schedule = depth_schedule(max_depth)
    control = DepthControl(schedule[0])
    recorder = _Recorder()
    stop = CancelToken()
    params = GenerationParams(sampler=SamplerParams(temperature=0.0), max_tokens=max_tokens, seed=0)
    finished: Finished | None = None
    n = 0
    for event in generate(target, drafter, prompt, params, depth=control, cancel=stop, adaptive=recorder):
        if isinstance(event, Verified):
            drafted, accepted, verify, overhead, step, sync, sample = recorder.observed[-1]
            if verify is not None:
                into.rounds.append(RoundSample(event.depth, drafted, accepted, verify, overhead, step, sync, sample))
            n += 1
            control.set(schedule[n % len(schedule)])
            if cancel.cancelled or time.perf_counter() >= deadline:
                stop.cancel()
        elif isinstance(event, Finished):
            finished = event
    if finished is None:  # pragma: no cover - generate always ends with Finished
        raise SpecchatError("the engine stopped without finishing")
    if finished.reason.value == "error":
        raise SpecchatError(finished.message or "the calibration run failed")
    into.tokens += finished.stats.generated
    into.seconds += finished.stats.generate_seconds
    into.runs += 1
    return finished


def measure(
    target: TargetSide,
    drafter: Drafter,
    prompts: Sequence[Sequence[int]],
    *,
    max_depth: int,
    max_tokens: int,
    deadline: float,
    cancel: CancelToken,
    on_prompt: Callable[[int], None] | None = None,
) -> Measurement:
    """Run the prompts in turn until each is done or the deadline passes (at least one round each time)."""
    out = Measurement()
    for i, prompt in enumerate(prompts):
        if cancel.cancelled or (i > 0 and time.perf_counter() >= deadline):
            break
        if on_prompt is not None:
            on_prompt(i)
        run_prompt(
            target,
            drafter,
            prompt,
            max_depth=max_depth,
            max_tokens=max_tokens,
            deadline=deadline,
            cancel=cancel,
            into=out,
        )
    return out
