"""The winner against plain decoding, interleaved: each prompt decoded plainly, then speculatively.

Running the two back to back, prompt by prompt, lets a shared machine's
drifting speed touch both alike (as ``specchat bench`` does). The speed-up is
a ratio of sums (tokens over seconds of each side), so long replies weigh more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.drafters import Drafter
from specchat.core.engine.speculative import TargetSide, generate
from specchat.core.types import Finished, GenerationParams, SamplerParams, SpecchatError, Verified


@dataclass(frozen=True)
class Confirmation:
    """Measured tokens and seconds of both sides over the prompts that ran."""

    depth: int
    plain_tokens: int
    plain_seconds: float
    spec_tokens: int
    spec_seconds: float
    prompts: int
    identical: bool  # greedy: the two sides produced the same tokens on every prompt

    @property
    def speedup(self) -> float:
        if self.plain_tokens == 0 or self.spec_seconds <= 0 or self.plain_seconds <= 0:
            return 0.0
        return (self.spec_tokens / self.spec_seconds) / (self.plain_tokens / self.plain_seconds)

    def to_json(self) -> dict[str, object]:
        return {
            "depth": self.depth,
            "speedup": round(self.speedup, 3),
            "prompts": self.prompts,
            "plain_tokens": self.plain_tokens,
            "plain_seconds": round(self.plain_seconds, 4),
            "spec_tokens": self.spec_tokens,
            "spec_seconds": round(self.spec_seconds, 4),
            "identical": self.identical,
        }


MIN_TOKENS = 16  # a run past the deadline still decodes this many: fewer say nothing about a rate


def _decode(
    target: TargetSide,
    drafter: Drafter,
    prompt: Sequence[int],
    depth: int,
    max_tokens: int,
    deadline: float,
    cancel: CancelToken,
) -> tuple[list[int], Finished]:
    params = GenerationParams(sampler=SamplerParams(temperature=0.0), max_tokens=max_tokens, seed=0)
    tokens: list[int] = []
    finished: Finished | None = None
    stop = CancelToken()
    for event in generate(target, drafter, prompt, params, depth=DepthControl(depth), cancel=stop):
        if isinstance(event, Finished):
            finished = event
        elif isinstance(event, Verified):
            tokens.extend(event.committed)
            if cancel.cancelled or (len(tokens) >= MIN_TOKENS and time.perf_counter() >= deadline):
                stop.cancel()
    if finished is None or finished.reason.value == "error":
        raise SpecchatError(finished.message if finished else "the confirming run stopped without finishing")
    return tokens, finished


def confirm(
    target: TargetSide,
    plain: Drafter,
    drafter: Drafter,
    prompts: Sequence[Sequence[int]],
    depth: int,
    *,
    max_tokens: int,
    deadline: float,
    cancel: CancelToken,
    on_prompt: Callable[[int], None] | None = None,
) -> Confirmation | None:
    """Decode each prompt plainly, then with ``drafter`` at ``depth``, until the deadline.

    The first pair always runs (past the deadline, each side stops after ``MIN_TOKENS``).

    None when cancelled before a pair of runs finished.
    """
    totals = [0, 0.0, 0, 0.0]
    done = 0
    identical = True
    for i, prompt in enumerate(prompts):
        if cancel.cancelled or (i > 0 and time.perf_counter() >= deadline):
            break
        if on_prompt is not None:
            on_prompt(i)
        base_tokens, base = _decode(target, plain, prompt, 0, max_tokens, deadline, cancel)
        spec_tokens, spec = _decode(target, drafter, prompt, depth, max_tokens, deadline, cancel)
        if cancel.cancelled:
            break
        shared = min(len(base_tokens), len(spec_tokens))  # either side may have stopped at the deadline
        identical = identical and base_tokens[:shared] == spec_tokens[:shared]
        totals[0] += base.stats.generated
        totals[1] += base.stats.generate_seconds
        totals[2] += spec.stats.generated
        totals[3] += spec.stats.generate_seconds
        done += 1
    if done == 0:
        return None
    return Confirmation(depth, int(totals[0]), totals[1], int(totals[2]), totals[3], done, identical)
