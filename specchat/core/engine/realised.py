"""What each way of drafting a round realised lately: committed tokens per second of its rounds, as timed.

The composite prices its rounds with a model of costs and acceptance, and a
model drifts: a neighbour's load slows the draft model and the target
unequally, a timing taken in a quiet second goes stale in a busy one. So the
composite also keeps, per *arm* (``plain``, ``lookup``, ``model``), the rounds
it actually ran: how many tokens each committed and how long it took from its
draft to the next round's. :meth:`RealisedRates.rate` is an arm's tokens per
second over its last few rounds, counted only while those rounds are recent,
so two arms are compared at nearly the same moment, under the same load.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

ARMS = ("plain", "lookup", "model")
# An arm's rate is over its latest rounds, this many at most. Set: unmeasured (a few rounds smooth acceptance).
ARM_ROUNDS = 4
# Fewest of them before the rate counts. Set: unmeasured.
MIN_ROUNDS = 2
# Rounds after which an arm's figures are too old to compare with another's. Set: unmeasured; a few seconds of
# decoding on the demo pair.
RECENT_ROUNDS = 48


@dataclass(frozen=True)
class ArmRound:
    """One round an arm drafted: its number (the composite's count), tokens committed, seconds."""

    number: int
    tokens: int
    seconds: float


class RealisedRates:
    """Per arm, its latest rounds as timed, and the rate they realised."""

    def __init__(self) -> None:
        self._rounds: dict[str, deque[ArmRound]] = {arm: deque(maxlen=ARM_ROUNDS) for arm in ARMS}

    def record(self, arm: str, number: int, tokens: int, seconds: float) -> None:
        """Round ``number`` of ``arm`` committed ``tokens`` in ``seconds``."""
        if seconds > 0.0 and tokens >= 0:
            self._rounds[arm].append(ArmRound(number, tokens, seconds))

    def last(self, arm: str) -> int | None:
        """The number of ``arm``'s latest round, None if it never ran."""
        rounds = self._rounds[arm]
        return rounds[-1].number if rounds else None

    def rate(self, arm: str, now: int) -> float | None:
        """``arm``'s tokens per second over its recent rounds (as of round ``now``); None with too few."""
        recent = [r for r in self._rounds[arm] if now - r.number <= RECENT_ROUNDS]
        if len(recent) < MIN_ROUNDS:
            return None
        return sum(r.tokens for r in recent) / sum(r.seconds for r in recent)

    def rates(self, now: int) -> dict[str, float]:
        """Every arm's recent rate, where it has one."""
        out = {}
        for arm in ARMS:
            rate = self.rate(arm, now)
            if rate is not None:
                out[arm] = rate
        return out
