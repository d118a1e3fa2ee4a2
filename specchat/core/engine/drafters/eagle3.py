"""Drafting with an EAGLE-3 head: one small decoder layer over features of three target layers.

The head (llama.cpp's ``draft-eagle3``) follows the target by itself, so it
needs no prefill: each round it decodes the last committed token with the
fused features of the target's state before it, then chains one decode per
further draft, fed with its own pre-norm hidden state. q is the head's own
distribution, so greedy rounds keep the target's argmax and sampled rounds
take the exact rule, as for every model drafter.
"""

from __future__ import annotations

from specchat.core.engine.drafters.base import MtpHeads
from specchat.core.engine.drafters.mtp import ChainedHeadsDrafter
from specchat.core.types import DrafterKind, DraftSource

Eagle3Head = MtpHeads
"""What the EAGLE-3 drafter drives (a :class:`specchat.core.llama.heads.Eagle3Context`): the same calls as
the target's MTP heads."""


class Eagle3Drafter(ChainedHeadsDrafter):
    """An EAGLE-3 head chained from the target's state at the last committed token.

    Without a draft p-min it drafts to the requested depth (llama.cpp's own
    default p-min is 0 for this drafter).
    """

    kind = DrafterKind.EAGLE3
    source = DraftSource("eagle3")
