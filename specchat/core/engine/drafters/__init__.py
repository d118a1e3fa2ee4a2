"""Who proposes the drafts: a small model, the target's own MTP heads, a head file, a lookup in the text so far,
or nobody; one module per drafter.

A drafter is a :class:`Drafter` (:mod:`.base`): the loop calls :meth:`Drafter.prefill` once the target holds
the prompt, then :meth:`Drafter.draft` with one :class:`DraftRequest` per round. Adding a drafter means its
module here (a subclass of :class:`Drafter`), its entry in :data:`specchat.core.engine.registry.DRAFTERS` and
its tests; every front end, the server and the draft finder read the registry. The automatic drafter, which
combines lookup with a model drafter, has a package of its own (:mod:`specchat.core.engine.composite`).

The llama.cpp objects a drafter drives are described by protocols (:class:`DraftContext`,
:class:`MtpHeads`), so the engine never imports llama.cpp. Reading this package loads the drafters the
built-in names below need; the head drafters (:mod:`.eagle3`, :mod:`.dflash`, :mod:`.dspark`) load when the
registry first builds one.
"""

from specchat.core.engine.drafters.base import (
    Draft,
    DraftContext,
    Drafter,
    DraftRequest,
    MtpHeads,
    SizedContext,
    draft_from,
)
from specchat.core.engine.drafters.draft_model import DraftModelDrafter
from specchat.core.engine.drafters.mtp import MTP_P_MIN, ChainedHeadsDrafter, MtpDrafter
from specchat.core.engine.drafters.ngram import NgramDrafter
from specchat.core.engine.drafters.none import NoDrafter

__all__ = [
    "MTP_P_MIN",
    "ChainedHeadsDrafter",
    "Draft",
    "DraftContext",
    "DraftModelDrafter",
    "DraftRequest",
    "Drafter",
    "MtpDrafter",
    "MtpHeads",
    "NgramDrafter",
    "NoDrafter",
    "SizedContext",
    "draft_from",
]
