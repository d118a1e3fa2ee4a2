"""The automatic drafter inside a batch: per sequence and round, n-gram lookup or the shared draft model.

Alone, Automatic is the composite drafter
(:class:`~specchat.core.engine.composite.drafter.CompositeDrafter`), which
prices every candidate by the round-cost model of one reply. Inside a batch
the round's cost belongs to the whole batch, and the batched engine already
sizes every sequence's draft by it (:func:`~specchat.core.engine.batched.allot`),
so here a sequence only picks which part drafts for it this round
(:func:`choose_arm`):

* lookup when it found a proposal and its drafts have been kept at least as
  often as the model's (lookup costs nothing to draft);
* else the model, in its slot of the shared draft context, as deep as the
  batch allots; and where the batch allots the model nothing (its steps cost
  more than they bring, or the batch's own rows fill the machine), the lookup
  proposal after all, if there was one;
* a part not run for :data:`RETRY_EVERY` rounds runs once, so that an
  acceptance measured long ago (or under another load) cannot keep it out;
* and the model only while rounds in which it drafted have realised at least
  as many tokens per second as rounds without it, at the same number of live
  sequences, both measured within the last :data:`STALE_ROUNDS` rounds
  (:class:`ModelGate`): the round-cost model prices the model's steps ahead,
  this judges them by what they delivered, so a cost line that drifts with
  the machine's load cannot keep a losing model in.

Each part's acceptance is counted per sequence (accepted drafts over the
drafts the target judged up to each round's first rejection), starting from
that part's over the batch's earlier sequences. The drafts are drawn as each
part draws them alone, so the verdict stays exact.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from specchat.core.engine.batched_draft import SlotDrafter
from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest
from specchat.core.types import DrafterKind

RETRY_EVERY = 8
"""A part not run for this many of a sequence's rounds runs in the next one it can (lookup: one that found a
proposal)."""
PRIOR_DRAFTS = 4
"""A part's acceptance in a new sequence starts at its acceptance over the earlier ones, weighing as this many
drafts."""
STALE_ROUNDS = 24
"""A batch rate older than this many rounds is measured again: without the model first, then with it."""
RATE_WEIGHT = 0.3
"""The weight of a round's rate in its moving average."""


@dataclass
class _Rate:
    tokens_per_second: float
    round_number: int  # the batch round it was last updated at


class ModelGate:
    """Whether the automatic sequences may draft with the shared model this round: by the tokens per second the
    batch realised lately in rounds with and without model drafting, at the same number of live sequences."""

    def __init__(self) -> None:
        self._rates: dict[tuple[int, bool], _Rate] = {}

    def allows(self, live: int, round_number: int) -> bool:
        """Whether a round of ``live`` sequences may draft with the model: not while rounds without it are
        unmeasured or stale (they are measured first), yes while rounds with it are, else by which realised more."""
        without = self._fresh(live, False, round_number)
        if without is None:
            return False
        with_model = self._fresh(live, True, round_number)
        return with_model is None or with_model >= without

    def observe(self, live: int, used_model: bool, tokens: int, seconds: float, round_number: int) -> None:
        """Count a round of ``live`` sequences that committed ``tokens`` in ``seconds``."""
        if seconds <= 0.0:
            return
        rate = tokens / seconds
        key = (live, used_model)
        if self._fresh(live, used_model, round_number) is None:
            self._rates[key] = _Rate(rate, round_number)
            return
        old = self._rates[key]
        self._rates[key] = _Rate(old.tokens_per_second + RATE_WEIGHT * (rate - old.tokens_per_second), round_number)

    def _fresh(self, live: int, used_model: bool, round_number: int) -> float | None:
        rate = self._rates.get((live, used_model))
        if rate is None or round_number - rate.round_number > STALE_ROUNDS:
            return None
        return rate.tokens_per_second


class Arm(enum.Enum):
    """Which part drafts a sequence's round."""

    LOOKUP = "lookup"
    MODEL = "model"


@dataclass
class ArmCount:
    """One part's drafts judged in one sequence (or pooled over finished ones)."""

    reached: int = 0  # drafts the target judged: every accepted one and the first rejected one of a round
    accepted: int = 0


@dataclass
class ArmTally:
    """Per part: what the target kept of a sequence's drafts, and the round it last drafted in."""

    counts: dict[Arm, ArmCount] = field(default_factory=lambda: {arm: ArmCount() for arm in Arm})
    last: dict[Arm, int] = field(default_factory=lambda: {arm: 0 for arm in Arm})

    def acceptance(self, arm: Arm, prior: float) -> float:
        """The chance that ``arm``'s draft is kept once those before it were, starting from ``prior``."""
        count = self.counts[arm]
        return (count.accepted + PRIOR_DRAFTS * prior) / (count.reached + PRIOR_DRAFTS)

    def observe(self, arm: Arm, round_number: int, drafted: int, accepted: int) -> None:
        """Count a round ``arm`` drafted ``drafted`` tokens in, ``accepted`` of them kept."""
        if drafted == 0:
            return
        count = self.counts[arm]
        count.accepted += accepted
        count.reached += accepted + (accepted < drafted)
        self.last[arm] = round_number


def choose_arm(round_number: int, found: int, model_cap: int, tally: ArmTally, priors: dict[Arm, float]) -> Arm | None:
    """The part that drafts this round: None when neither can (no proposal, no room for the model).

    ``found``: the tokens lookup proposed; ``model_cap``: the most the model may draft."""
    if found == 0 and model_cap == 0:
        return None
    if model_cap == 0:
        return Arm.LOOKUP
    if found == 0:
        return Arm.MODEL
    for arm in (Arm.MODEL, Arm.LOOKUP):  # a part left out too long runs once
        if round_number - tally.last[arm] >= RETRY_EVERY:
            return arm
    lookup = tally.acceptance(Arm.LOOKUP, priors[Arm.LOOKUP])
    model = tally.acceptance(Arm.MODEL, priors[Arm.MODEL])
    return Arm.LOOKUP if lookup >= model else Arm.MODEL


class AutoSlotDrafter(Drafter):
    """One sequence's automatic drafter in a batch: a lookup drafter and its slot of the shared draft model.

    The batched engine asks its parts itself (:attr:`lookup` at once, :attr:`model` in the shared steps);
    :meth:`draft` alone drafts by lookup, else with the model."""

    kind = DrafterKind.COMPOSITE
    follows_text = True  # the model's slot catches up on the committed text before it drafts

    def __init__(self, lookup: Drafter, model: SlotDrafter) -> None:
        self.lookup, self.model = lookup, model
        self.tally = ArmTally()

    def prefill(self, tokens: Sequence[int]) -> None:
        """Nothing: the model's slot reads the prompt at the sequence's first model draft, if it ever drafts (a
        reply that lookup drafts, or that runs while the model does not pay, never pays the read)."""

    def behind(self, tokens: Sequence[int]) -> int:
        return self.model.behind(tokens)

    def draft(self, request: DraftRequest) -> Draft:
        """A draft outside a batch's round: the lookup's proposal if any, else the model's."""
        found = self.lookup.draft(request)
        return found if found.tokens else self.model.draft(request)

    def forget(self) -> None:
        """Empty the model's slot (after a failure that may have left it mid-round)."""
        self.model.forget()
