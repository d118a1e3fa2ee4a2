"""Head file formats: the one table of what a drafter head file is, read by every layer that meets one.

A head is a small GGUF that drafts for one target from that target's own
hidden states (EAGLE-3, DFlash, DFlash2, DSpark), or a target's MTP layers in a
file of their own. Each :class:`HeadFormat` says how a file of that format is
recognised (its ``general.architecture``, its file-name keyword as
``llama-server -hf`` finds sidecars, and :attr:`HeadFormat.reads`, which tells
formats of one architecture apart from the header), its name for people, how
the llama.cpp binding drives it (:attr:`HeadFormat.context`) and which drafter
of the registry drafts with it. The picker, the downloader, the terminal's
``--sidecar`` choices, the draft finder, the binding (``core/llama/heads.py``)
and the drafter registry all read :data:`HEAD_FORMATS` when they run, so a new
format is one entry here (plus, for a new way of driving one, its binding and
drafter).

This module sits below both ``core/llama`` and ``core/models`` and imports
neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

CHAINED = "chained"
"""A context that decodes one draft at a time, fed with its own hidden state (EAGLE-3)."""
BLOCK = "block"
"""A context that decodes a block of drafts in one pass (the DFlash family)."""


@dataclass(frozen=True)
class HeadHeader:
    """What a file's header says, as far as telling head formats apart needs it."""

    arch: str  # general.architecture
    filename: str = ""
    tensors: frozenset[str] = frozenset()  # tensor names (only those a format looks for need be present)
    selector_top_k: int = 0  # {arch}.selector_top_k (DFlash2's lattice)
    mtp_layers: int = 0  # {arch}.nextn_predict_layers


@dataclass(frozen=True)
class HeadFormat:
    """One head file format (see the module docstring)."""

    kind: str
    """Its name: in JSON, the catalog, ``--sidecar``, a loaded head's ``head_kind`` and the registry's parts."""
    label: str
    """Its name for people, e.g. ``EAGLE-3 head`` (one per format, everywhere)."""
    arch: str
    """The ``general.architecture`` of its files; "" for MTP layers, which keep the target's."""
    sidecar: str
    """The file-name keyword ``llama-server -hf`` finds it by (``eagle3-``); "" where it shares another's."""
    reads: Callable[[HeadHeader], bool] = lambda header: True
    """The header reader: whether a file of :attr:`arch` (or named with :attr:`sidecar`) is this format.
    Formats are tried in table order, so a narrower one comes before the one it refines."""
    tensor: str = ""
    """A tensor only its files hold ("" : none): the readers of its architecture are handed whether it is there."""
    drafter: str = ""
    """The registry entry that drafts with it ("" : none in this build)."""
    context: str = ""
    """How the binding drives it: :data:`CHAINED` or :data:`BLOCK` ("" : it loads no context of its own)."""
    target_layers: int = 0
    """How many target layers a file must read (0: any number, at least one)."""
    anchor_draft: bool = False
    """A block format whose first slot is a draft too when the file says ``sample_from_anchor``."""

    def matches(self, header: HeadHeader) -> bool:
        """Whether ``header`` is a file of this format (its marking tensor, if any, and its reader)."""
        return (not self.tensor or self.tensor in header.tensors) and self.reads(header)

    @property
    def block(self) -> bool:
        """Whether it drafts a block per pass (a natural depth, and it may read the target's final layer)."""
        return self.context == BLOCK


HEAD_FORMATS: tuple[HeadFormat, ...] = (
    HeadFormat("mtp", "MTP layers", "", "mtp-", lambda h: h.mtp_layers > 0),
    HeadFormat("eagle3", "EAGLE-3 head", "eagle3", "eagle3-", drafter="eagle3", context=CHAINED, target_layers=3),
    # DSpark and DFlash2 refine DFlash: llama.cpp's common_speculative_types_from_gguf tells them apart by the
    # Markov head's tensor and the selector.
    HeadFormat(
        "dspark",
        "DSpark head",
        "dflash",
        "dspark-",
        tensor="markov_w1.weight",
        drafter="dspark",
        context=BLOCK,
        anchor_draft=True,
    ),
    HeadFormat(
        "dflash2", "DFlash2 head", "dflash", "", lambda h: h.selector_top_k > 0, drafter="dflash", context=BLOCK
    ),
    HeadFormat("dflash", "DFlash head", "dflash", "dflash-", drafter="dflash", context=BLOCK),
)
"""Every head format, most specific first within an architecture; sidecar keywords are tried in this order."""


def head_formats() -> tuple[HeadFormat, ...]:
    """Every head format (read at the call: callers never keep their own copy)."""
    return HEAD_FORMATS


def head_format(kind: str) -> HeadFormat | None:
    """The format called ``kind``; None for a name no format has."""
    return next((f for f in HEAD_FORMATS if f.kind == kind), None)


def head_label(kind: str) -> str:
    """A format's name for people (``kind`` itself for an unknown one)."""
    found = head_format(kind)
    return found.label if found is not None else kind


def head_archs() -> frozenset[str]:
    """The GGUF architectures that are drafter heads for another model, not models of their own."""
    return frozenset(f.arch for f in HEAD_FORMATS if f.arch)


def sidecar_keywords() -> tuple[tuple[str, str], ...]:
    """(file-name keyword, format kind) for every format with a keyword of its own, in table order."""
    return tuple((f.sidecar, f.kind) for f in HEAD_FORMATS if f.sidecar)


def sidecar_kinds() -> tuple[str, ...]:
    """The kinds a sidecar can be found as by its name (``--sidecar`` choices)."""
    return tuple(kind for _, kind in sidecar_keywords())


def read_format(header: HeadHeader) -> HeadFormat | None:
    """The format a file's header says it is: the first of its architecture whose reader accepts it, or, for a
    file of no head architecture, a format without one (MTP layers) whose keyword its name holds; else None."""
    if header.arch in head_archs():
        return next((f for f in HEAD_FORMATS if f.arch == header.arch and f.matches(header)), None)
    name = header.filename.rsplit("/", 1)[-1]
    return next((f for f in HEAD_FORMATS if not f.arch and f.sidecar and f.sidecar in name and f.matches(header)), None)


def marking_tensors(arch: str) -> tuple[str, ...]:
    """The tensors whose presence tells formats of ``arch`` apart (a reader of the header looks only for these)."""
    return tuple(f.tensor for f in HEAD_FORMATS if f.arch == arch and f.tensor)
