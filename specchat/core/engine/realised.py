"""What each way of drafting a round took lately, against what the model of costs said it would take.

The composite prices its rounds with a model of costs, and a model drifts: a
neighbour's load slows the draft model, a batched verify and a one-token pass
unequally, and a timing taken in a quiet second goes stale in a busy one. So the
composite also times, per *arm* (``plain``, ``lookup``, ``model``), the rounds it
actually ran, from its draft to the next round's, beside the seconds the model
of costs predicted for that very round (the same drafts, so acceptance, which
depends on the text, is left out). :meth:`RealisedCosts.factor` is an arm's
realised over predicted time in the median of its last few rounds, counted only
while those are recent; the composite prices each arm's candidates by it, so arms are
compared by what they cost under the load of the moment.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

ARMS = ("plain", "lookup", "model")
# An arm's factor is over its latest rounds, this many at most. Set: unmeasured (a few rounds smooth a stall).
ARM_ROUNDS = 4
# Fewest of them before the factor counts. Set: unmeasured.
MIN_ROUNDS = 2
# Rounds after which an arm's timings are too old to count. Set: unmeasured; a few seconds of decoding on the
# demo pair, more than the composite's retry interval so a retried arm stays priced.
RECENT_ROUNDS = 48
# The factor's bounds: past them a timing says more about one stall than about the machine. Set: unmeasured; the
# upper one above the 100-fold slowdown of a window's rounds on a busy machine (issue 36).
FACTOR_RANGE = (0.2, 200.0)


@dataclass(frozen=True)
class ArmRound:
    """One round of an arm: its number (the composite's count), predicted and realised seconds."""

    number: int
    predicted: float
    realised: float


class RealisedCosts:
    """Per arm, its latest rounds' predicted and realised seconds."""

    def __init__(self) -> None:
        self._rounds: dict[str, deque[ArmRound]] = {arm: deque(maxlen=ARM_ROUNDS) for arm in ARMS}

    def record(self, arm: str, number: int, predicted: float, realised: float) -> None:
        """Round ``number`` of ``arm`` took ``realised`` seconds where ``predicted`` were expected."""
        if predicted > 0.0 and realised > 0.0:
            self._rounds[arm].append(ArmRound(number, predicted, realised))

    def last(self, arm: str) -> int | None:
        """The number of ``arm``'s latest round, None if it never ran."""
        rounds = self._rounds[arm]
        return rounds[-1].number if rounds else None

    def factor(self, arm: str, now: int) -> float | None:
        """``arm``'s realised over predicted seconds in its median recent round (as of round ``now``); None with too
        few."""
        recent = [r for r in self._rounds[arm] if now - r.number <= RECENT_ROUNDS]
        if len(recent) < MIN_ROUNDS:
            return None
        # The median round's (the lower of the middle two), not the sum's: one stalled round among a few says
        # more about a time slice lost than about the arm, and the arm would sit out until it is retried.
        ratio = sorted(r.realised / r.predicted for r in recent)[(len(recent) - 1) // 2]
        return min(max(ratio, FACTOR_RANGE[0]), FACTOR_RANGE[1])

    def factors(self, now: int) -> dict[str, float]:
        """Every arm's recent factor, where it has one."""
        out = {}
        for arm in ARMS:
            factor = self.factor(arm, now)
            if factor is not None:
                out[arm] = factor
        return out
