"""Which drafter a kind means, built on what the loaded pair offers.

Kept apart from :mod:`specchat.core.engine.drafters` because the composite
drafter builds on those drafters: this module imports both, neither imports it.
"""

from __future__ import annotations

from typing import Protocol, cast

from specchat.core.engine.composite import CompositeDrafter
from specchat.core.engine.dflash import BlockHead, DFlashDrafter
from specchat.core.engine.drafters import (
    DraftContext,
    Drafter,
    DraftModelDrafter,
    MtpDrafter,
    MtpHeads,
    NgramDrafter,
    NoDrafter,
)
from specchat.core.engine.dspark import DSparkDrafter
from specchat.core.engine.eagle3 import Eagle3Drafter, Eagle3Head
from specchat.core.types import DrafterKind, SpecchatError

_HEAD_KINDS = {DrafterKind.EAGLE3: ("eagle3",), DrafterKind.DFLASH: ("dflash", "dflash2"),
               DrafterKind.DSPARK: ("dspark",)}


class DraftHead(Protocol):
    """A head loaded with ``--draft`` (:class:`specchat.core.llama.heads.HeadContext`): its kind says which
    drafter drives it (an :class:`Eagle3Head` or a :class:`BlockHead`)."""

    @property
    def head_kind(self) -> str: ...

    def describe(self) -> str: ...


def head_drafter(head: DraftHead) -> Drafter:
    """The drafter that drives ``head``, by the kind its file declares."""
    if head.head_kind == "eagle3":
        return Eagle3Drafter(cast(Eagle3Head, head))
    if head.head_kind == "dspark":
        return DSparkDrafter(cast(BlockHead, head))
    return DFlashDrafter(cast(BlockHead, head))


def make_drafter(kind: DrafterKind, draft_context: DraftContext | None, mtp: MtpHeads | None = None,
                 head: DraftHead | None = None) -> Drafter:
    """The drafter of ``kind`` on what the loaded pair offers; a one-line SpecchatError if it lacks the part.

    A head loaded in place of a draft model (``--draft head.gguf``) is what "draft model" means.
    """
    if kind is DrafterKind.DRAFT_MODEL:
        if draft_context is None and head is not None:
            return head_drafter(head)
        if draft_context is None:
            raise SpecchatError("no draft model is loaded; choose n-gram lookup or none")
        return DraftModelDrafter(draft_context)
    if kind in _HEAD_KINDS:
        if head is None or head.head_kind not in _HEAD_KINDS[kind]:
            loaded = f"the loaded head is {head.describe()}" if head is not None else "no head is loaded"
            raise SpecchatError(f"{kind.value} drafting needs a {kind.value} head file (--draft PATH); {loaded}")
        return head_drafter(head)
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
        if head is not None:
            return CompositeDrafter(head_drafter(head))
        if mtp is not None:
            return CompositeDrafter(MtpDrafter(mtp))
        raise SpecchatError("automatic drafting needs a draft model or MTP heads; choose n-gram lookup or none")
    return NoDrafter()
