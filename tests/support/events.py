"""Hand-built engine events for view and panel tests."""

from __future__ import annotations

from collections.abc import Sequence

from specchat.core.types import Drafted, Event, Finished, Verified


def finished(events: Sequence[Event], at: int = -1) -> Finished:
    """The event at ``at`` (the last by default), which must be a reply's ``Finished``."""
    event = events[at]
    assert isinstance(event, Finished), event
    return event


def drafted(n: int, pieces: tuple[str, ...]) -> Drafted:
    return Drafted(n, tuple(range(len(pieces))), pieces, tuple(0.5 for _ in pieces))


def verified(n: int, acc: tuple[str, ...], rej: tuple[str, ...], corr: str) -> Verified:
    k = len(acc) + len(rej)
    return Verified(
        round=n,
        depth=k,
        accepted=tuple(range(len(acc))),
        rejected=tuple(range(len(rej))),
        correction=7,
        accepted_pieces=acc,
        rejected_pieces=rej,
        correction_piece=corr,
        target_probs=tuple(0.25 for _ in range(k)),
        draft_probs=tuple(0.75 for _ in range(k)),
        correction_prob=0.5,
    )
