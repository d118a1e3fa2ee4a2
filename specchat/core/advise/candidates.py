"""What could draft for a target: compatible GGUFs, the target's own heads, head files (EAGLE-3, DFlash,
DSpark) beside it or in the library, n-gram lookup, every other drafter of the registry the target alone
can run, catalog drafts and heads.

In the window, the draft model loaded with the target is always judged (it may
live anywhere: the demo's ships inside a Python package), and the automatic
drafter (lookup, then that draft or the target's heads) is a candidate of its own.

Library files bigger than the target are left out (a draft must be cheaper
than the target to pay); files named by the user are always judged. An
incompatible file stays in the list with the reason, so the user learns why a
file next to the model is not offered.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specchat.core.cancel import CancelToken
from specchat.core.head_formats import head_format, head_label
from specchat.core.models.catalog import COMPUTE_SHARE, MTP_GB, load_catalog
from specchat.core.models.compat import CompatReport, compare
from specchat.core.models.ggufmeta import GgufInfo, read_gguf_info
from specchat.core.models.heads import HeadInfo, check_head, heads_beside, read_head
from specchat.core.models.library import ModelRoot, default_roots, scan
from specchat.core.models.shape import read_model_shape
from specchat.core.paths import not_a_file
from specchat.core.types import DrafterKind, SpecchatError

GB = 1e9
_FIRST_DIFF_RE = re.compile(r"first at id (\d+)")
_SIZE_TOKEN_RE = re.compile(r"\d+(\.\d+)?[bm]$")


class CandidateKind(str, enum.Enum):
    DRAFT = "draft"  # a draft model file on disk
    MTP = "mtp"  # the target's own multi-token-prediction heads
    NGRAM = "ngram"  # n-gram lookup in the conversation
    COMPOSITE = "composite"  # the automatic drafter: lookup, then the draft file (``path``) or the target's heads
    HEAD = "head"  # a head file trained for the target (``head`` says its format: eagle3, dflash, dspark, mtp ...)
    DRAFTER = "drafter"  # another drafter of the registry that the target alone can run (``name`` says which)
    CATALOG = "catalog"  # a catalog draft (or head) of the target's family: download to try
    INCOMPATIBLE = "incompatible"  # a file that cannot draft for this target


@dataclass(frozen=True)
class Candidate:
    """One way to draft for the target; ``reason`` says why an unmeasurable one is listed."""

    kind: CandidateKind
    label: str
    path: str = ""  # the draft file (DRAFT, INCOMPATIBLE)
    reason: str = ""
    size_bytes: int = 0  # the draft's file (or download) size
    memory_bytes: int = 0  # target and drafter together at the calibration context
    source: str = ""  # where it was found: a library source, "named", "loaded", "beside the target", a pair id
    warnings: tuple[str, ...] = ()
    head: str = ""  # HEAD (and a catalog head): its head format's kind
    natural_depth: int = 0  # HEAD: the drafts one pass gives (DFlash's block size - 1); 0: no natural depth
    name: str = ""  # DRAFTER: the registry entry

    @property
    def drafter(self) -> str | None:
        """The registry's drafter for this candidate; None when it cannot run here (a head format this build's
        engine has no drafter for)."""
        if self.kind is CandidateKind.HEAD:
            return head_drafter_kind(self.head)
        if self.kind is CandidateKind.DRAFTER:
            return self.name or None
        return {
            CandidateKind.DRAFT: DrafterKind.DRAFT_MODEL,
            CandidateKind.MTP: DrafterKind.MTP,
            CandidateKind.NGRAM: DrafterKind.NGRAM,
            CandidateKind.COMPOSITE: DrafterKind.COMPOSITE,
        }.get(self.kind)

    @property
    def measurable(self) -> bool:
        return self.drafter is not None

    @property
    def key(self) -> str:
        """Unique within one target's list."""
        return f"{self.kind.value}:{self.path or self.label}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "label": self.label,
            "path": self.path,
            "reason": self.reason,
            "size_bytes": self.size_bytes,
            "memory_bytes": self.memory_bytes,
            "source": self.source,
            "drafter": None if self.drafter is None else str.__str__(self.drafter),
            "warnings": list(self.warnings),
            "head": self.head or None,
        }


def head_drafter_kind(head: str) -> str | None:
    """The registry's drafter for a head format, when this build has one (an MTP sidecar has none: specchat
    drafts with MTP layers inside the target's own file)."""
    from specchat.core.engine.registry import head_drafter_name

    return head_drafter_name(head) if head else None


def unmeasurable_reason(head: str) -> str:
    """One line for a head this build cannot measure."""
    found = head_format(head)
    if found is not None and not found.arch:
        return (
            f"{found.label} in a file of their own: this build drafts only with {found.label} inside the target's file"
        )
    name = head_label(head)
    return f"this build has no {name.split()[0]} drafter, so the {name} cannot be measured here"


@dataclass
class CandidateList:
    target: GgufInfo
    candidates: list[Candidate] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # unreadable library files, one line each

    @property
    def measurable(self) -> list[Candidate]:
        return [c for c in self.candidates if c.measurable]


def family(name: str) -> str:
    """A model family from a base name or a repository name: ``Qwen2.5-Coder-32B-Instruct`` -> ``qwen2.5coder``."""
    words = re.split(r"[-_\s/]+", name.lower())
    out: list[str] = []
    for word in words:
        if _SIZE_TOKEN_RE.fullmatch(word) or word in ("gguf", "instruct", "it", "mtp"):
            break
        out.append(re.sub(r"[^a-z0-9.]", "", word))
    return "".join(out)


def _target_family(info: GgufInfo) -> str:
    return family(info.basename or info.path.stem)


def incompatibility(report: CompatReport) -> str:
    """The first problem as a short line: ``incompatible: token 128000 differs``."""
    problem = report.problems[0] if report.problems else "unknown"
    m = _FIRST_DIFF_RE.search(problem)
    if m:
        return f"incompatible: token {m.group(1)} differs"
    return f"incompatible: {problem}"


def memory_needed(target: Path, draft: Path | None, n_ctx: int, *, mtp: bool = False) -> int:
    """Weights and KV caches of the target and the draft (plus the MTP block's buffers), in bytes."""
    try:
        total = read_model_shape(target).memory_bytes(n_ctx)
        if draft is not None:
            total += read_model_shape(draft).memory_bytes(n_ctx)
    except (SpecchatError, OSError):
        return 0
    return int(total + (MTP_GB * GB if mtp else 0))


class _Judge:
    """Judges files against one target, reading the target's vocabulary once and only when needed."""

    def __init__(self, target: GgufInfo, n_ctx: int) -> None:
        self.target = target
        self.n_ctx = n_ctx
        self._with_vocab: GgufInfo | None = None

    def _target_vocab(self) -> GgufInfo:
        if self._with_vocab is None:
            self._with_vocab = read_gguf_info(self.target.path, with_vocab=True)
        return self._with_vocab

    def __call__(self, path: Path, source: str) -> Candidate:
        """A file as a DRAFT or HEAD candidate, or an INCOMPATIBLE one with the reason."""
        target = self.target
        info = read_gguf_info(path)
        head = read_head(path, info)
        if head is not None:
            return self.head(head, source)
        if info.tokenizer_model == target.tokenizer_model and info.vocab_fingerprint != target.vocab_fingerprint:
            # Same kind of tokenizer, different tokens: a token-level check says which, or finds a padding tail.
            report = compare(self._target_vocab(), read_gguf_info(path, with_vocab=True))
        else:
            report = compare(target, info)
        if not report.ok:
            return Candidate(
                CandidateKind.INCOMPATIBLE, path.name, str(path), incompatibility(report), info.file_size, source=source
            )
        return Candidate(
            CandidateKind.DRAFT,
            path.name,
            str(path),
            "",
            info.file_size,
            memory_needed(target.path, path, self.n_ctx),
            source,
            tuple(report.warnings),
        )

    def head(self, head: HeadInfo, source: str) -> Candidate:
        """A head file as a HEAD candidate (its reason says when this build cannot measure it) or INCOMPATIBLE."""
        check = check_head(self.target.path, head, self.target)
        size = head.info.file_size if head.info is not None else 0
        if not check.ok:
            return Candidate(
                CandidateKind.INCOMPATIBLE,
                head.label,
                str(head.path),
                f"incompatible: {check.problems[0]}",
                size,
                source=source,
                head=head.kind,
            )
        reason = "" if head_drafter_kind(head.kind) is not None else unmeasurable_reason(head.kind)
        memory = memory_needed(self.target.path, None, self.n_ctx) + int((1 + COMPUTE_SHARE) * size)
        return Candidate(
            CandidateKind.HEAD,
            head.label,
            str(head.path),
            reason,
            size,
            memory,
            source,
            head=head.kind,
            natural_depth=head.natural_depth or 0,
        )


def _catalog_drafts(target: GgufInfo, n_ctx: int) -> list[Candidate]:
    """Drafts the catalog recommends for targets of this family, one per repository and quant."""
    mine = _target_family(target)
    if not mine:
        return []
    seen: set[tuple[str, str]] = set()
    out: list[Candidate] = []
    target_memory = memory_needed(target.path, None, n_ctx)
    for pair in load_catalog():
        draft = pair.draft
        if pair.local or draft is None or family(pair.target.repo.split("/")[-1]) != mine:
            continue
        if (draft.repo, draft.quant) in seen:
            continue
        seen.add((draft.repo, draft.quant))
        size = int(draft.size_gb * GB)
        label = draft.file or f"{draft.repo.split('/')[-1]} {draft.quant}"
        out.append(
            Candidate(
                CandidateKind.CATALOG,
                label,
                "",
                f"download to try ({draft.size_gb:.2f} GB, {draft.repo})",
                size,
                target_memory + int((1 + COMPUTE_SHARE) * size),
                pair.id,
            )
        )
    return out


def _named_files(paths: Iterable[Path], cancel: CancelToken) -> list[Path]:
    """The GGUF files a user named: files as given, folders searched (one level and below) until ``cancel``."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        kind = not_a_file(path)
        if kind == "a folder":
            out += _gguf_files_under(path, cancel)
        elif kind == "not found":
            raise SpecchatError(f"candidate not found: {path}")
        elif kind is not None:
            raise SpecchatError(f"candidate is not a file but {kind}: {path}")
        else:
            out.append(path)
    return out


def _gguf_files_under(folder: Path, cancel: CancelToken) -> list[Path]:
    """The regular ``*.gguf`` files under ``folder`` (symlinked folders not followed), sorted; the walk
    stops once ``cancel`` is set (Ctrl-C on ``--candidates /``)."""
    found: list[Path] = []
    for where, _, names in os.walk(folder):
        if cancel.cancelled:
            break
        found += [p for p in (Path(where) / n for n in names if n.endswith(".gguf")) if not_a_file(p) is None]
    return sorted(found)


def find_candidates(
    target: Path | str,
    named: Sequence[Path | str] = (),
    *,
    library: bool = True,
    roots: Sequence[ModelRoot] | None = None,
    lookup: bool = True,
    catalog: bool = True,
    n_ctx: int = 4096,
    cancel: CancelToken | None = None,
    loaded_draft: Path | str | None = None,
    composite: bool = False,
) -> CandidateList:
    """Every candidate for ``target``: the ``loaded_draft`` (the one loaded with it, always judged), named
    files, then (``library``) the library's smaller files, the target's MTP heads, the automatic drafter
    (``composite``: with the loaded draft if it is compatible, else with the heads), n-gram lookup
    (``lookup``) and catalog drafts (``catalog``).

    Raises a one-line SpecchatError for a missing or unreadable target or named file. Once ``cancel`` is
    set, the search stops and returns what it found.
    """
    cancel = cancel or CancelToken()
    target_path = Path(target).expanduser()
    kind = not_a_file(target_path)
    if kind == "not found":
        raise SpecchatError(f"target model not found: {target_path}")
    if kind is not None:
        raise SpecchatError(f"target model is not a file but {kind}: {target_path}")
    info = read_gguf_info(target_path)
    result = CandidateList(info)
    judge = _Judge(info, n_ctx)
    seen = {target_path.resolve()}
    loaded: Candidate | None = None
    if loaded_draft:
        path = Path(loaded_draft).expanduser()
        if not_a_file(path) is not None:
            raise SpecchatError(f"the loaded draft model is gone: {path}")
        seen.add(path.resolve())
        loaded = judge(path, "loaded")
        result.candidates.append(loaded)
    for path in _named_files((Path(p) for p in named), cancel):
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        result.candidates.append(judge(path, "named"))
    if library and not cancel.cancelled:
        found = scan(
            roots if roots is not None else [ModelRoot(target_path.parent, "next to the target"), *default_roots()]
        )
        result.skipped = list(found.failed)
        for entry in found.entries:
            if entry.path.resolve() in seen or entry.info.file_size >= info.file_size:
                continue
            seen.add(entry.path.resolve())
            try:
                result.candidates.append(judge(entry.path, entry.source))
            except SpecchatError as exc:
                result.skipped.append(f"{entry.path.name}: {exc}")
    if not cancel.cancelled:
        for path in heads_beside(target_path):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            try:
                result.candidates.append(judge(path, "beside the target"))
            except SpecchatError as exc:
                result.skipped.append(f"{path.name}: {exc}")
    if info.mtp_layers:
        n = info.mtp_layers
        result.candidates.append(
            Candidate(
                CandidateKind.MTP,
                f"built-in MTP heads ({n} layer{'s' if n > 1 else ''})",
                "",
                "",
                0,
                memory_needed(target_path, None, n_ctx, mtp=True),
                "target",
            )
        )
    if composite and loaded is not None and loaded.kind is CandidateKind.DRAFT:
        result.candidates.append(
            Candidate(
                CandidateKind.COMPOSITE,
                f"automatic: lookup + {loaded.label}",
                loaded.path,
                "",
                0,
                loaded.memory_bytes,
                "loaded",
                loaded.warnings,
            )
        )
    elif composite and info.mtp_layers:
        result.candidates.append(
            Candidate(
                CandidateKind.COMPOSITE,
                "automatic: lookup + MTP heads",
                "",
                "",
                0,
                memory_needed(target_path, None, n_ctx, mtp=True),
                "target",
            )
        )
    if lookup:
        result.candidates.append(
            Candidate(
                CandidateKind.NGRAM, "n-gram lookup", "", "", 0, memory_needed(target_path, None, n_ctx), "built in"
            )
        )
        result.candidates += _other_drafters(target_path, info, n_ctx)
    if catalog:
        result.candidates += _catalog_drafts(info, n_ctx)
        result.candidates += _catalog_heads(info)
    return result


_FOUND_APART = {DrafterKind.DRAFT_MODEL, DrafterKind.MTP, DrafterKind.NGRAM, DrafterKind.COMPOSITE}
"""Registry drafters the finder lists in ways of their own (draft files, the target's heads, lookup, the
automatic drafter); head drafters come with their head files."""


def _other_drafters(target: Path, info: GgufInfo, n_ctx: int) -> list[Candidate]:
    """Every other drafter of the registry that the target alone can run (it needs nothing, or the target's own
    MTP heads where it has them), so that a drafter added to the registry is measured too."""
    from specchat.core.engine.registry import Part, drafter_entries

    offered = {Part.MTP_HEADS.value} if info.mtp_layers else set()
    out: list[Candidate] = []
    for entry in drafter_entries():
        if entry.name in _FOUND_APART or entry.heads or not entry.drafts or not entry.available(offered):
            continue
        mtp = Part.MTP_HEADS.value in entry.parts
        out.append(
            Candidate(
                CandidateKind.DRAFTER,
                entry.label_for(offered),
                "",
                "",
                0,
                memory_needed(target, None, n_ctx, mtp=mtp),
                "built in",
                name=entry.key,
            )
        )
    return out


def _catalog_heads(target: GgufInfo) -> list[Candidate]:
    """Heads the catalog names for targets of this family: GGUF ones to download, others to convert."""
    from specchat.core.models.catalog import load_heads

    mine = _target_family(target).removeprefix("meta")
    size = (target.size_label or "").lower()
    out: list[Candidate] = []
    for head in load_heads():
        sizes = [w for w in re.split(r"[-_\s/]+", head.target_family.lower()) if _SIZE_TOKEN_RE.fullmatch(w)]
        if not mine or family(head.target_family).removeprefix("meta") != mine or (size and sizes and sizes[0] != size):
            continue
        how = (
            f"download to try ({head.size_gb:.2f} GB, {head.repo})"
            if head.file
            else f"published as {head.format} ({head.repo}): convert with llama.cpp's convert_hf_to_gguf.py "
            "--target-model-dir"
        )
        out.append(
            Candidate(CandidateKind.CATALOG, head.label, "", how, int(head.size_gb * GB), 0, head.id, head=head.kind)
        )
    return out
