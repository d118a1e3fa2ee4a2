"""A reply's running figures, folded from the engine's events.

The chat window's stats panel, the store's reply writer and the terminal fold
the same events, so they count the same way: ``rounds`` are the rounds that
drafted something (as the engine counts them), ``passes`` every verify pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from specchat.core.types import Drafted, Finished, GenerationStats, Verified


@dataclass
class ReplyFigures:
    """Counters of one reply, updated event by event; ``final`` holds the engine's own at the end."""

    passes: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    depth: int = 0
    accepted_per_round: list[tuple[int, int]] = field(default_factory=list)  # (round, accepted) per pass
    final: GenerationStats | None = None
    finish_reason: str | None = None

    def fold(self, events: Iterable[object]) -> bool:
        """Count ``events``; True when a verified round changed the counters."""
        changed = False
        for event in events:
            if isinstance(event, Verified):
                drafted = len(event.accepted) + len(event.rejected)
                self.passes += 1
                self.rounds += 1 if drafted else 0
                self.drafted += drafted
                self.accepted += len(event.accepted)
                self.generated += len(event.committed)
                self.depth = event.depth
                self.accepted_per_round.append((event.round, len(event.accepted)))
                changed = True
            elif isinstance(event, Drafted):
                self.depth = len(event.tokens)
            elif isinstance(event, Finished):
                if event.stats != GenerationStats():  # the front end's own Finished (closed, failed) has none
                    self.final = event.stats
                self.finish_reason = event.reason.value
        return changed

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        """Accepted drafts per drafted round (rounds at depth 0 draft nothing and are not counted)."""
        return self.accepted / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The engine's figures once finished; until then the counters so far (stored with a streaming reply)."""
        if self.final is not None:
            return {**self.final.as_dict(), "passes": self.passes}
        return {
            "passes": self.passes,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "generated": self.generated,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_per_round": round(self.mean_accepted_per_round, 3),
            "depth": self.depth,
        }

    @classmethod
    def from_dict(cls, stats: dict[str, Any] | None) -> ReplyFigures:
        """Figures of a stored reply (its ``stats`` column)."""
        figures = cls()
        if not stats:
            return figures
        figures.passes = int(stats.get("passes", 0))
        figures.rounds = int(stats.get("rounds", 0))
        figures.drafted = int(stats.get("drafted", 0))
        figures.accepted = int(stats.get("accepted", 0))
        figures.generated = int(stats.get("generated", 0))
        figures.depth = int(stats.get("depth", 0))
        tps = float(stats.get("tokens_per_second", 0.0) or 0.0)
        if tps > 0:
            figures.final = GenerationStats(
                rounds=figures.rounds,
                drafted=figures.drafted,
                accepted=figures.accepted,
                generated=figures.generated,
                generate_seconds=figures.generated / tps,
                depth=figures.depth,
                plain_tokens_per_second_estimate=float(stats.get("plain_tokens_per_second_estimate", 0.0)),
            )
        return figures
