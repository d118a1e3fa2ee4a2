"""Which drafter a kind means, built on what the loaded pair offers.

Kept apart from :mod:`specchat.core.engine.drafters` because the composite
drafter builds on those drafters: this module imports both, neither imports it.
"""

from __future__ import annotations

from specchat.core.engine.composite import CompositeDrafter
from specchat.core.engine.drafters import (
    DraftContext,
    Drafter,
    DraftModelDrafter,
    MtpDrafter,
    MtpHeads,
    NgramDrafter,
    NoDrafter,
)
from specchat.core.types import DrafterKind, SpecchatError


def make_drafter(kind: DrafterKind, draft_context: DraftContext | None, mtp: MtpHeads | None = None) -> Drafter:
    """The drafter of ``kind`` on what the loaded pair offers; a one-line SpecchatError if it lacks the part."""
    if kind is DrafterKind.DRAFT_MODEL:
        if draft_context is None:
            raise SpecchatError("no draft model is loaded; choose n-gram lookup or none")
        return DraftModelDrafter(draft_context)
    if kind is DrafterKind.MTP:
        if mtp is None:
            raise SpecchatError("the target has no MTP heads (no NextN layers) to draft with; "
                                "choose a draft model, n-gram lookup or none")
        return MtpDrafter(mtp)
    if kind is DrafterKind.NGRAM:
        return NgramDrafter()
    if kind is DrafterKind.COMPOSITE:
        if draft_context is not None:
            return CompositeDrafter(DraftModelDrafter(draft_context))
        if mtp is not None:
            return CompositeDrafter(MtpDrafter(mtp))
        raise SpecchatError("automatic drafting needs a draft model or MTP heads; choose n-gram lookup or none")
    return NoDrafter()
