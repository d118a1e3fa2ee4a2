"""Plain decoding: the drafter that never drafts."""

from __future__ import annotations

from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest
from specchat.core.types import DrafterKind


class NoDrafter(Drafter):
    """Plain decoding: never drafts."""

    kind = DrafterKind.NONE
    can_draft = False

    def draft(self, request: DraftRequest) -> Draft:
        return Draft()
