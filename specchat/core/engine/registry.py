"""The drafter registry: every drafter's name, label, what it needs from the loaded pair, what it can do, its factory.

Front ends (the window's drafter list, the terminal's ``--drafter``), the
settings and the runtime read this table and nothing else, so adding a
drafter is its module, its entry in :data:`DRAFTERS` and its tests
(docs/architecture.md, "Adding a drafter").

Names are plain strings; the built-in ones are also
:class:`~specchat.core.types.DrafterKind` values (a ``str`` enum, so either
form looks an entry up). Factories import their drafter when called, so
reading the table loads neither numpy nor the drafters.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specchat.core.types import DrafterKind, SpecchatError

if TYPE_CHECKING:
    from specchat.core.engine.drafters import DraftContext, Drafter, MtpHeads


class Part(str, enum.Enum):
    """What a loaded pair may offer a drafter beside the target."""

    DRAFT_MODEL = "draft"  # a second, small model with its own context
    MTP_HEADS = "mtp"  # the target's own multi-token-prediction (NextN) heads


PART_LABELS: dict[str, str] = {Part.DRAFT_MODEL: "draft model", Part.MTP_HEADS: "MTP heads"}


@dataclass(frozen=True)
class Parts:
    """The loaded pair's parts, as the drafters drive them (None: not loaded)."""

    draft: DraftContext | None = None
    mtp: MtpHeads | None = None

    def offered(self) -> frozenset[str]:
        """The names of the parts present (:class:`Part` values)."""
        found = {Part.DRAFT_MODEL: self.draft, Part.MTP_HEADS: self.mtp}
        return frozenset(part.value for part, value in found.items() if value is not None)


@dataclass(frozen=True)
class DrafterEntry:
    """One drafter as everyone outside the engine sees it."""

    name: str
    """Its kind: the key in settings, ``--drafter``, JSON output and :attr:`Drafter.kind`."""
    label: str
    """Its name for people; ``{model}`` is replaced by the label of the part it drafts with."""
    build: Callable[[Parts], Drafter]
    """Makes the drafter on the pair's parts (only called when :meth:`available`)."""
    needs: tuple[str, ...] = ()
    """Parts (:class:`Part` values) it can draft with: any one of them; empty: it needs nothing."""
    drafts: bool = True
    """False for plain decoding: the loop never asks it, Auto depth has nothing to pick."""
    samples: bool = True
    """True: at temperature > 0 it draws from its own distribution q (the exact rule with a real q);
    False: it proposes one-hot drafts (still lossless, fewer accepted at high temperature)."""
    block: int | None = None
    """The depth it drafts best at when it has one (a head trained for a fixed block); None: any."""
    keep: bool = False
    """True for a drafter that learns from its rounds: the runtime keeps one per loaded pair between replies."""
    missing: str = ""
    """The one-line error when the pair lacks every part it needs (empty: a generic one)."""

    @property
    def key(self) -> str:
        """The name as plain text (a built-in's name is a DrafterKind member), for JSON and widgets."""
        return str.__str__(self.name)

    def available(self, offered: Collection[str]) -> bool:
        """Whether a pair offering ``offered`` parts can run it."""
        return not self.needs or any(part in offered for part in self.needs)

    def label_for(self, offered: Collection[str] = ()) -> str:
        """The label, naming the first needed part the pair offers (else the first it needs)."""
        if "{model}" not in self.label:
            return self.label
        part = next((p for p in self.needs if p in offered), self.needs[0] if self.needs else "")
        return self.label.replace("{model}", PART_LABELS.get(part, part))

    def lacking(self) -> str:
        """What a pair without it lacks, e.g. ``"draft model or MTP heads"``."""
        return " or ".join(PART_LABELS.get(p, p) for p in self.needs)

    def make(self, parts: Parts) -> Drafter:
        """The drafter on ``parts``; a one-line SpecchatError naming what is missing."""
        if not self.available(parts.offered()):
            raise SpecchatError(self.missing or f"the loaded pair has no {self.lacking()} to draft with "
                                                f"{self.label_for()!r}")
        return self.build(parts)


def _draft_model(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters import DraftModelDrafter

    assert parts.draft is not None
    return DraftModelDrafter(parts.draft)


def _mtp(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters import MtpDrafter

    assert parts.mtp is not None
    return MtpDrafter(parts.mtp)


def _ngram(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters import NgramDrafter

    return NgramDrafter()


def _composite(parts: Parts) -> Drafter:
    from specchat.core.engine.composite import CompositeDrafter
    from specchat.core.engine.drafters import DraftModelDrafter, MtpDrafter

    if parts.draft is not None:
        return CompositeDrafter(DraftModelDrafter(parts.draft))
    assert parts.mtp is not None
    return CompositeDrafter(MtpDrafter(parts.mtp))


def _none(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters import NoDrafter

    return NoDrafter()


DRAFTERS: tuple[DrafterEntry, ...] = (
    DrafterEntry(DrafterKind.COMPOSITE, "Automatic (lookup + {model})", _composite,
                 needs=(Part.DRAFT_MODEL, Part.MTP_HEADS), keep=True,
                 missing="automatic drafting needs a draft model or MTP heads; choose n-gram lookup or none"),
    DrafterEntry(DrafterKind.DRAFT_MODEL, "Draft model", _draft_model, needs=(Part.DRAFT_MODEL,),
                 missing="no draft model is loaded; choose n-gram lookup or none"),
    DrafterEntry(DrafterKind.NGRAM, "N-gram (prompt lookup)", _ngram, samples=False),
    DrafterEntry(DrafterKind.MTP, "The model's own MTP heads", _mtp, needs=(Part.MTP_HEADS,),
                 missing="the target has no MTP heads (no NextN layers) to draft with; "
                         "choose a draft model, n-gram lookup or none"),
    DrafterEntry(DrafterKind.NONE, "None (plain decoding)", _none, drafts=False, samples=False),
)
"""Every drafter, in the order front ends list them; the first one a pair can run is its default."""

_BY_NAME: dict[str, DrafterEntry] = {entry.name: entry for entry in DRAFTERS}


def drafter_entries() -> tuple[DrafterEntry, ...]:
    """Every drafter, in list order (read at the call: front ends never keep their own copy)."""
    return DRAFTERS


def drafter_names() -> list[str]:
    """Every drafter's name, in list order."""
    return [entry.name for entry in DRAFTERS]


def drafter_entry(name: str) -> DrafterEntry:
    """The entry called ``name``; a one-line SpecchatError listing the names for an unknown one."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise SpecchatError(f"no drafter called {name!r}; choose one of {', '.join(_BY_NAME)}") from None


def available_drafters(offered: Collection[str]) -> list[DrafterEntry]:
    """The drafters a pair offering ``offered`` parts can run, in list order."""
    return [entry for entry in DRAFTERS if entry.available(offered)]


def default_drafter(offered: Collection[str]) -> DrafterEntry:
    """What a pair offering ``offered`` drafts with when the chosen drafter needs a part it lacks."""
    return next(entry for entry in DRAFTERS if entry.drafts and entry.available(offered))


def make_drafter(kind: str, draft_context: DraftContext | None, mtp: MtpHeads | None = None) -> Drafter:
    """The drafter of ``kind`` on what the loaded pair offers; a one-line SpecchatError if it lacks the part."""
    return drafter_entry(kind).make(Parts(draft_context, mtp))
