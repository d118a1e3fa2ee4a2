"""The drafter registry: every drafter's name, label, what it needs from the loaded pair, what it can do, its factory.

Front ends (the window's drafter list, the terminal's ``--drafter``), the
settings, the server, the draft finder and the runtime read this table when
they run and keep no copy, so adding a drafter is its module, its entry in
:data:`DRAFTERS` and its tests (docs/architecture.md, "Adding a drafter").
Which head files a head drafter drives comes from the table of head formats
(:data:`specchat.core.head_formats.HEAD_FORMATS`, each naming its drafter).

Names are plain strings; the built-in ones are also
:class:`~specchat.core.types.DrafterKind` values (a ``str`` enum, so either
form looks an entry up). Factories import their drafter when called, so
reading the table loads neither numpy nor the drafters.

One name is also a request: ``"draft"`` is the draft-model drafter, and, asked
of a pair whose file loaded with ``--draft`` is a head rather than a draft
model, it means that head's own drafter (``eagle3``, ``dflash``, ``dspark``),
as llama-server drafts with whatever ``--model-draft`` holds. :func:`resolve`
is that one rule; every reader applies it where a name comes in (a setting, a
stored reply, an API request, the terminal's default), and what runs, is
reported and is stored afterwards is the resolved name, never ``"draft"`` for
a head.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, cast

from specchat.core.head_formats import head_format, head_formats, head_label
from specchat.core.types import DrafterKind, SpecchatError

if TYPE_CHECKING:
    from specchat.core.engine.drafters import DraftContext, Drafter, MtpHeads


class DraftHead(Protocol):
    """A head loaded with ``--draft`` (:class:`specchat.core.llama.heads.HeadContext`); its kind (a head
    format's, e.g. ``eagle3``, ``dflash2``) says which entry drives it."""

    @property
    def head_kind(self) -> str: ...

    def describe(self) -> str: ...


class Part(str, enum.Enum):
    """What a loaded pair may offer a drafter beside the target."""

    DRAFT_MODEL = "draft"  # a second, small model with its own context
    MTP_HEADS = "mtp"  # the target's own multi-token-prediction (NextN) heads
    HEAD = "head"  # a drafter head file (EAGLE-3, DFlash, ...): offered as ``head:<its kind>``, see head_part()


PART_LABELS: dict[str, str] = {Part.DRAFT_MODEL: "draft model", Part.MTP_HEADS: "MTP heads"}


def head_part(head_kind: str) -> str:
    """The part a loaded head of ``head_kind`` offers, e.g. ``"head:eagle3"`` (an entry needs it to drive it)."""
    return f"{Part.HEAD.value}:{head_kind}"


def part_label(part: str) -> str:
    """A part's name for people; a head part by its format's label (e.g. "EAGLE-3 head")."""
    if part in PART_LABELS:
        return PART_LABELS[part]
    prefix = f"{Part.HEAD.value}:"
    return head_label(part.removeprefix(prefix)) if part.startswith(prefix) else part


@dataclass(frozen=True)
class Parts:
    """The loaded pair's parts, as the drafters drive them (None: not loaded)."""

    draft: DraftContext | None = None
    mtp: MtpHeads | None = None
    head: DraftHead | None = None

    def offered(self) -> frozenset[str]:
        """The names of the parts present (:class:`Part` values; a head as :func:`head_part`)."""
        found = {Part.DRAFT_MODEL: self.draft, Part.MTP_HEADS: self.mtp}
        offered = {part.value for part, value in found.items() if value is not None}
        if self.head is not None:
            offered.add(head_part(self.head.head_kind))
        return frozenset(offered)


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
    """Parts (:class:`Part` values) it can draft with besides head files: any one of them; with :attr:`heads`
    empty too, it needs nothing."""
    heads: Literal["", "own", "any"] = ""
    """Head files it drafts with: "own", those whose format names this entry as its drafter; "any", every
    format some drafter drives (the automatic drafter); "": none."""
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
    def parts(self) -> tuple[str, ...]:
        """Every part it can draft with: :attr:`needs`, then the head parts :attr:`heads` says (read from the
        table of head formats at the call)."""
        if not self.heads:
            return self.needs
        driven = [f.kind for f in head_formats() if f.drafter and (self.heads == "any" or f.drafter == self.name)]
        return (*self.needs, *(head_part(kind) for kind in driven))

    @property
    def key(self) -> str:
        """The name as plain text (a built-in's name is a DrafterKind member), for JSON and widgets."""
        return str.__str__(self.name)

    def available(self, offered: Collection[str]) -> bool:
        """Whether a pair offering ``offered`` parts can run it."""
        parts = self.parts
        return not parts or any(part in offered for part in parts)

    def label_for(self, offered: Collection[str] = ()) -> str:
        """The label, naming the first needed part the pair offers (else the first it needs)."""
        if "{model}" not in self.label:
            return self.label
        parts = self.parts
        part = next((p for p in parts if p in offered), parts[0] if parts else "")
        return self.label.replace("{model}", part_label(part))

    def lacking(self) -> str:
        """What a pair without it lacks, e.g. ``"draft model or MTP heads"``."""
        parts = self.parts
        heads = {part_label(p) for p in parts if p.startswith(f"{Part.HEAD.value}:")}
        generic = "drafter head" if self.heads == "any" else None  # the composite drives any head: one name
        return " or ".join(
            dict.fromkeys(generic if generic and part_label(p) in heads else part_label(p) for p in parts)
        )

    def enable_hint(self) -> str:
        """What would make it usable, for a drafter the loaded pair cannot run (a greyed-out entry's tooltip)."""
        parts = self.parts
        if not parts:
            return ""
        mtp = 'a target with its own MTP heads (the picker\'s Recommended tab marks them "own MTP heads")'
        if self.heads == "own":
            heads = " or ".join(dict.fromkeys(_with_article(part_label(p)) for p in sorted(parts)))
            return f"load {heads} made for this target as the draft (File → Choose models…)"
        if parts == (Part.MTP_HEADS,):
            return f"needs {mtp}: load one as the target"
        if parts == (Part.DRAFT_MODEL,):
            return "load a draft model beside the target (File → Choose models…)"
        return f"load a draft model or a drafter head beside the target (File → Choose models…), or {mtp}"

    def make(self, parts: Parts) -> Drafter:
        """The drafter on ``parts``; a one-line SpecchatError naming what is missing."""
        if not self.available(parts.offered()):
            loaded = f" (the loaded head is {parts.head.describe()})" if parts.head is not None else ""
            raise SpecchatError(
                (self.missing or f"the loaded pair has no {self.lacking()} to draft with {self.label_for()!r}") + loaded
            )
        return self.build(parts)


def _with_article(label: str) -> str:
    return f"{'an' if label[:1] in 'AEIOU' else 'a'} {label}"


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


def _eagle3(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters.eagle3 import Eagle3Drafter, Eagle3Head

    return Eagle3Drafter(cast("Eagle3Head", parts.head))


def _dflash(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters.dflash import BlockHead, DFlashDrafter

    return DFlashDrafter(cast("BlockHead", parts.head))


def _dspark(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters.dflash import BlockHead
    from specchat.core.engine.drafters.dspark import DSparkDrafter

    return DSparkDrafter(cast("BlockHead", parts.head))


def head_drafters() -> tuple[DrafterEntry, ...]:
    """The entries that drive head files of their own (EAGLE-3, DFlash, DSpark), in list order."""
    return tuple(entry for entry in DRAFTERS if entry.heads == "own")


def head_drafter_name(head_kind: str) -> str | None:
    """The name of the entry that drives a head file of ``head_kind`` (``dflash2``: ``dflash``); None: none does."""
    found = head_format(head_kind)
    if found is None or not found.drafter:
        return None
    entry = _by_name().get(found.drafter)
    return entry.name if entry is not None and entry.heads == "own" else None


def head_entry(head: DraftHead) -> DrafterEntry:
    """The entry that drives ``head``; a one-line SpecchatError for a kind no entry drives."""
    name = head_drafter_name(head.head_kind)
    if name is None:
        raise SpecchatError(f"no drafter drives {head.describe()}")
    return _by_name()[name]


def _composite(parts: Parts) -> Drafter:
    from specchat.core.engine.composite import CompositeDrafter
    from specchat.core.engine.drafters import DraftModelDrafter, MtpDrafter

    if parts.draft is not None:
        return CompositeDrafter(DraftModelDrafter(parts.draft))
    if parts.head is not None:
        return CompositeDrafter(head_entry(parts.head).build(parts))
    assert parts.mtp is not None
    return CompositeDrafter(MtpDrafter(parts.mtp))


def _none(parts: Parts) -> Drafter:
    from specchat.core.engine.drafters import NoDrafter

    return NoDrafter()


def _head_missing(kind: str) -> str:
    return f"{kind} drafting needs a {kind} head file (--draft PATH); no such head is loaded"


_HEAD_DRAFTERS: tuple[DrafterEntry, ...] = (
    DrafterEntry(DrafterKind.EAGLE3, head_label("eagle3"), _eagle3, heads="own", missing=_head_missing("eagle3")),
    DrafterEntry(DrafterKind.DFLASH, head_label("dflash"), _dflash, heads="own", missing=_head_missing("dflash")),
    DrafterEntry(DrafterKind.DSPARK, head_label("dspark"), _dspark, heads="own", missing=_head_missing("dspark")),
)
"""The drafters of head files loaded with ``--draft``, each driving the head formats that name it. A head's
natural block comes from its file (``block`` stays None): the drafter caps each round at it."""

DRAFTERS: tuple[DrafterEntry, ...] = (
    DrafterEntry(
        DrafterKind.COMPOSITE,
        "Automatic (lookup + {model})",
        _composite,
        needs=(Part.DRAFT_MODEL, Part.MTP_HEADS),
        heads="any",
        keep=True,
        missing="automatic drafting needs a draft model, a drafter head or MTP heads; choose n-gram lookup or none",
    ),
    DrafterEntry(
        DrafterKind.DRAFT_MODEL,
        "Draft model",
        _draft_model,
        needs=(Part.DRAFT_MODEL,),
        missing="no draft model is loaded; choose n-gram lookup or none",
    ),
    DrafterEntry(DrafterKind.NGRAM, "N-gram (prompt lookup)", _ngram, samples=False),
    DrafterEntry(
        DrafterKind.MTP,
        "The model's own MTP heads",
        _mtp,
        needs=(Part.MTP_HEADS,),
        missing="the target has no MTP heads (no NextN layers) to draft with; "
        "choose a draft model, n-gram lookup or none",
    ),
    *_HEAD_DRAFTERS,
    DrafterEntry(DrafterKind.NONE, "None (plain decoding)", _none, drafts=False, samples=False),
)
"""Every drafter, in the order front ends list them; the first one a pair can run is its default. Everything
here reads it at the call, so an entry added to it (at test time too) reaches every reader."""


def _by_name() -> dict[str, DrafterEntry]:
    return {entry.name: entry for entry in DRAFTERS}


_SOURCE_NAMES = {"lookup": "lookup", "model": "draft model", "mtp": "MTP heads"}


def source_name(source: str) -> str:
    """A draft source (a :class:`~specchat.core.types.DraftSource` value) in words, e.g. "draft model";
    a drafter that is its own source (a head drafter) is named by its entry's label."""
    if source in _SOURCE_NAMES:
        return _SOURCE_NAMES[source]
    entry = _by_name().get(source)
    return entry.label if entry is not None else str(source)


def drafter_entries() -> tuple[DrafterEntry, ...]:
    """Every drafter, in list order (read at the call: front ends never keep their own copy)."""
    return DRAFTERS


def drafter_names() -> list[str]:
    """Every drafter's name as plain text (what ``--drafter`` and the API take), in list order."""
    return [entry.key for entry in DRAFTERS]


def drafter_entry(name: str) -> DrafterEntry:
    """The entry called ``name``; a one-line SpecchatError listing the names for an unknown one."""
    by_name = _by_name()
    try:
        return by_name[name]
    except (KeyError, TypeError):
        raise SpecchatError(f"no drafter called {name!r}; choose one of {', '.join(by_name)}") from None


def resolve(name: str, offered: Collection[str]) -> DrafterEntry:
    """The entry ``name`` means on a pair offering ``offered`` parts: itself, except that ``"draft"`` asked of a
    pair whose ``--draft`` file is a head (no draft model) means that head's own entry. A head no drafter drives
    leaves ``"draft"`` as it is (unavailable there); a one-line SpecchatError for an unknown name."""
    entry = drafter_entry(name)
    if entry.name != DrafterKind.DRAFT_MODEL or Part.DRAFT_MODEL.value in offered:
        return entry
    prefix = f"{Part.HEAD.value}:"
    driven = (head_drafter_name(part.removeprefix(prefix)) for part in offered if part.startswith(prefix))
    head_name = next((found for found in driven if found is not None), None)
    return entry if head_name is None else _by_name()[head_name]


def entry_for(name: str, parts: Parts) -> DrafterEntry:
    """The entry ``name`` means on ``parts`` (:func:`resolve`); ``"draft"`` on a head no drafter drives is a
    one-line SpecchatError naming the head."""
    entry = resolve(name, parts.offered())
    if entry.name == DrafterKind.DRAFT_MODEL and parts.draft is None and parts.head is not None:
        return head_entry(parts.head)
    return entry


def available_drafters(offered: Collection[str]) -> list[DrafterEntry]:
    """The drafters a pair offering ``offered`` parts can run, in list order."""
    return [entry for entry in DRAFTERS if entry.available(offered)]


def default_drafter(offered: Collection[str]) -> DrafterEntry:
    """What a pair offering ``offered`` drafts with when the chosen drafter needs a part it lacks."""
    return next(entry for entry in DRAFTERS if entry.drafts and entry.available(offered))


def make_drafter(
    kind: str, draft_context: DraftContext | None, mtp: MtpHeads | None = None, head: DraftHead | None = None
) -> Drafter:
    """The drafter of ``kind`` on what the loaded pair offers; a one-line SpecchatError if it lacks the part."""
    parts = Parts(draft_context, mtp, head)
    return entry_for(kind, parts).make(parts)
