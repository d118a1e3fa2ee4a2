"""Drafting with a DSpark head: a DFlash block with a Markov head and a confidence head.

Each block position's logits carry a bias from the token before it (the
Markov head, chained inside llama.cpp's graph through each position's
argmax), and the confidence head estimates per position whether the target
will keep it. As in llama.cpp's ``draft-dspark``, a draft p-min cuts the
block at the first position whose confidence is below it (where the file
has no confidence head: whose top probability is), and the drafts come from
the anchor slot on where the head says so (one more draft per block than
DFlash). The Markov chain follows the argmax, so a sampled draft that is
not the argmax leaves the next position's q conditioned on another token:
q is still the distribution the draft was drawn from, so the exact rule
holds; it costs acceptance only.
"""

from __future__ import annotations

import dataclasses

from specchat.core.engine.drafters.base import Draft, DraftRequest, draft_from
from specchat.core.engine.drafters.dflash import DFlashDrafter, HeadBlock, _rows_after
from specchat.core.types import DrafterKind, DraftSource


class DSparkDrafter(DFlashDrafter):
    """A DSpark head: DFlash's block, cut by the confidence head where a draft p-min is set."""

    kind = DrafterKind.DSPARK
    source = DraftSource("dspark")

    def _read(self, out: Draft, block: HeadBlock, request: DraftRequest, synced: float) -> None:
        rows = block.logits[: request.k]
        if request.p_min and block.confidence is not None:
            sure = block.confidence[: len(rows)] >= request.p_min
            n = len(rows) if sure.all() else int(sure.argmin())
            rows = rows[:n]
            request = dataclasses.replace(request, p_min=0.0)  # the confidence head decided
        if len(rows) == 0:
            return
        draft_from(out, rows[0], _rows_after(rows), dataclasses.replace(request, k=len(rows)), synced)
