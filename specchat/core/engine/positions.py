"""Acceptance by draft position: how often draft position i is accepted once the target judges it.

The target judges draft position i only when positions 1..i-1 were accepted
(a draft after a rejection is discarded unseen), so position i's rate is
``accepted_i / reached_i``: the conditional acceptance that the expected
tokens per round multiply up (:func:`specchat.core.engine.depth.expected_tokens_curve`).
One definition serves the stats panel's curve, the X-ray and the depth controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PositionCounts:
    """Per draft position (index 0 is position 1): rounds that reached it, and rounds that accepted it."""

    reached: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def add(self, drafted: int, accepted: int) -> None:
        """Count one round that drafted ``drafted`` tokens and kept the first ``accepted`` of them."""
        reached = min(drafted, accepted + 1)
        if reached > len(self.reached):
            grow = reached - len(self.reached)
            self.reached += [0] * grow
            self.accepted += [0] * grow
        for i in range(reached):
            self.reached[i] += 1
        for i in range(min(accepted, reached)):
            self.accepted[i] += 1

    def merge(self, other: PositionCounts) -> None:
        """Add ``other``'s counts to these."""
        for i, (r, a) in enumerate(zip(other.reached, other.accepted, strict=True)):
            if i == len(self.reached):
                self.reached.append(0)
                self.accepted.append(0)
            self.reached[i] += r
            self.accepted[i] += a

    def as_list(self) -> list[list[int]]:
        """``[[reached, accepted], ...]`` per position, for JSON."""
        return [[r, a] for r, a in zip(self.reached, self.accepted, strict=True)]

    @classmethod
    def from_list(cls, data: Any) -> PositionCounts:
        """Counts from :meth:`as_list`'s form; anything malformed counts as nothing."""
        counts = cls()
        if not isinstance(data, list):
            return counts
        for pair in data:
            if not (isinstance(pair, list) and len(pair) == 2 and all(type(x) is int and x >= 0 for x in pair)):
                return cls()
            counts.reached.append(pair[0])
            counts.accepted.append(min(pair[1], pair[0]))
        return counts


def position_acceptance(rounds: PositionCounts | Iterable[PositionCounts]) -> list[tuple[float, int]]:
    """The curve: per draft position from 1, ``(acceptance, rounds that reached it)``.

    ``rounds`` is one reply's counts or several (a conversation's), summed.
    Positions no round reached are not in the curve.
    """
    total = PositionCounts()
    for counts in [rounds] if isinstance(rounds, PositionCounts) else rounds:
        total.merge(counts)
    return [(a / r, r) for r, a in zip(total.reached, total.accepted, strict=True) if r > 0]


def counts_of(outcomes: Sequence[tuple[int, int]]) -> PositionCounts:
    """The counts of rounds given as ``(drafted, accepted)`` pairs."""
    counts = PositionCounts()
    for drafted, accepted in outcomes:
        counts.add(drafted, accepted)
    return counts
