"""Hand-built engine rounds that carry the token X-ray's data (top lists, sources)."""

from __future__ import annotations

from specchat.core.types import DraftSource, Verified


def xray_round(
    accepted: int, rejected: int, correction: int | None = 99, *, number: int = 3, greedy: bool = True
) -> Verified:
    """A round whose first draft came from lookup (a match of 4) and the rest from the draft model.

    Drafts are tokens 10, 11, ... shown as ``d0``, ``d1``, ...; at each position the target's favourite is
    token 50+i (``t<i>``, p 0.6) and the draft follows at 0.3; the draft gave each of its tokens q 0.8.
    """
    drafts = list(range(10, 10 + accepted + rejected))
    target_top = tuple(
        ((50 + i, 0.6, f"t{i}"), (drafts[i] if i < len(drafts) else 0, 0.3, f"d{i}")) for i in range(len(drafts) + 1)
    )
    return Verified(
        round=number,
        depth=len(drafts),
        accepted=tuple(drafts[:accepted]),
        rejected=tuple(drafts[accepted:]),
        correction=correction,
        accepted_pieces=tuple(f"d{i}" for i in range(accepted)),
        rejected_pieces=tuple(f"d{i}" for i in range(accepted, len(drafts))),
        correction_piece="" if correction is None else f"t{accepted}",
        target_probs=(0.3,) * len(drafts),
        draft_probs=(0.8,) * len(drafts),
        correction_prob=0.6,
        sources=tuple(DraftSource.MODEL if i else DraftSource.LOOKUP for i in range(len(drafts))),
        match_lengths=tuple(0 if i else 4 for i in range(len(drafts))),
        target_top=target_top,
        draft_top=tuple(((t, 0.8, f"d{i}"),) for i, t in enumerate(drafts)),
        greedy=greedy,
    )
