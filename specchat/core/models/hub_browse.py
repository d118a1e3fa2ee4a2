"""Browsing the hub for a model, as the picker's Hub tab does it: a repository's quantisations, the verdict on
each against the loaded target, the draft that fits a target, and the download of the chosen files.

Nothing here knows about Qt; the picker runs these functions in its workers. A file is judged from the head of
it on the hub (:mod:`hub_header`) with the rules files on disk are judged by (:mod:`compat`, :mod:`fit`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.core.cancel import CancelToken
from specchat.core.models.catalog import load_catalog
from specchat.core.models.compat import SIZE_RATIO_WARN, compare
from specchat.core.models.download import DownloadedFile, DownloadProgress, download_file, format_bytes
from specchat.core.models.fit import MachineMemory, fit_pair
from specchat.core.models.ggufmeta import GgufInfo, parse_size_label
from specchat.core.models.hub import HubFile, HubRepo, call_cancellable, list_gguf_files, search_gguf, side_file
from specchat.core.models.hub_header import RemoteModel, read_remote_model
from specchat.core.models.naming import display_name
from specchat.core.models.shape import ModelShape
from specchat.core.types import SpecchatError

SEARCH_TIMEOUT = 20.0  # seconds for a search or a listing before the picker says the hub is not answering
_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_SIZE_IN_NAME = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([MB])(?![A-Za-z0-9])", re.IGNORECASE)
_DRAFT_QUANTS = ("Q8_0", "Q4_K_M", "Q4_0")  # a draft's quant, in order of preference
_DRAFT_CANDIDATES = 3  # same-family repositories whose headers are read before giving up


@dataclass(frozen=True)
class QuantChoice:
    """One downloadable model in a repository: a quantisation's file, or every part of a split one."""

    quant: str  # "Q4_K_M" ...; "" when the file name names none
    files: tuple[HubFile, ...]  # the first part first

    @property
    def first(self) -> HubFile:
        """The file llama.cpp loads (the first part of a split model)."""
        return self.files[0]

    @property
    def size(self) -> int | None:
        """All parts together, or None when the hub gave no size for one."""
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def label(self) -> str:
        """``Q4_K_M``, or the file name when it names no quantisation."""
        return self.quant or self.first.filename.rsplit("/", 1)[-1]


def group_quants(files: list[HubFile]) -> list[QuantChoice]:
    """A listing's models, one per quantisation (a split model's parts as one), smallest first.

    Side files (vision projectors, drafter sidecars) are left out. Two files of one quantisation that are not
    parts of one model (``x-Q4_K_M.gguf`` and ``x-Q4_K_M-imat.gguf``) stay two choices.
    """
    models: dict[str, list[HubFile]] = {}
    for f in files:
        if f.filename.lower().endswith(".gguf") and not side_file(f.filename):
            models.setdefault(_SPLIT_RE.sub("", f.filename), []).append(f)
    choices = []
    for parts in models.values():
        parts.sort(key=lambda f: f.filename)
        if parts[0].split is not None and parts[0].split[0] != 1:
            continue  # a split model without its first part cannot be loaded
        choices.append(QuantChoice(parts[0].quant or "", tuple(parts)))
    return sorted(choices, key=lambda c: (c.size is None, c.size or 0, c.first.filename))


def search(query: str, *, endpoint: str | None = None, cancel: CancelToken | None = None) -> list[HubRepo]:
    """GGUF repositories matching ``query``; a hub that does not answer in :data:`SEARCH_TIMEOUT` s is one line."""
    return call_cancellable(
        lambda: search_gguf(query, limit=30, endpoint=endpoint),
        cancel,
        f"the search for {query!r}",
        timeout=SEARCH_TIMEOUT,
    )


def list_choices(repo_id: str, *, endpoint: str | None = None, cancel: CancelToken | None = None) -> list[QuantChoice]:
    """``repo_id``'s models grouped by quantisation (see :func:`group_quants`)."""
    files = call_cancellable(
        lambda: list_gguf_files(repo_id, endpoint=endpoint),
        cancel,
        f"the file list of {repo_id}",
        timeout=SEARCH_TIMEOUT,
    )
    return group_quants(files)


def read_choice(
    repo_id: str, choice: QuantChoice, *, endpoint: str | None = None, cancel: CancelToken | None = None
) -> RemoteModel:
    """The metadata of ``choice`` (its first part's header), sized as all its parts together."""
    return read_remote_model(repo_id, choice.first.filename, choice.size or 0, endpoint=endpoint, cancel=cancel)


def sized(model: RemoteModel, size: int | None) -> RemoteModel:
    """``model`` as another quantisation of the same repository would be: its size changed, its vocabulary not."""
    if size is None:
        return model
    shape = dataclasses.replace(model.shape, file_size=size) if model.shape is not None else None
    return dataclasses.replace(model, info=dataclasses.replace(model.info, file_size=size), shape=shape)


@dataclass(frozen=True)
class HubVerdict:
    """What a file would be for the loaded target (``draft``) or in its place (``target``), and whether it works."""

    role: str  # "draft" or "target"
    ok: bool
    text: str  # one line, starting with ✓ or ✗


@dataclass(frozen=True)
class LoadedTarget:
    """The target the picker was opened with: its metadata (with its vocabulary) and shape."""

    info: GgufInfo
    shape: ModelShape


def read_loaded_target(path: str) -> LoadedTarget | None:
    """The loaded target's metadata, or None without one (reads a vocabulary: keep off a GUI thread)."""
    from specchat.core.models.ggufmeta import read_gguf_info
    from specchat.core.models.shape import read_model_shape

    p = Path(path).expanduser() if path else None
    if p is None or not p.is_file():
        return None
    try:
        return LoadedTarget(read_gguf_info(p, with_vocab=True), read_model_shape(p))
    except SpecchatError:
        return None


def judge(
    model: RemoteModel, loaded: LoadedTarget | None, n_ctx: int, memory: MachineMemory, draft: RemoteModel | None = None
) -> HubVerdict:
    """The verdict on ``model``: as a draft for ``loaded`` when it is a fraction of its size, else as a target
    (with ``draft`` beside it when one is offered); the vocabulary rules of :func:`compat.compare` and the memory
    rules of :func:`fit.fit_pair`."""
    if model.shape is None:
        return HubVerdict("target", False, "✗ no model shape in its header (a drafter head or a projector?)")
    size = model.info.file_size
    if loaded is not None and 0 < size <= SIZE_RATIO_WARN * loaded.info.file_size:
        report = compare(loaded.info, model.info, n_ctx=n_ctx)
        fits = fit_pair(loaded.shape, model.shape, n_ctx, memory)
        mark = "✓" if report.ok else "✗"
        return HubVerdict(
            "draft",
            report.ok and fits.ok,
            f"{mark} as a draft for {display_name(loaded.info)}: {report.summary()}; {_unmarked(fits.text)}",
        )
    own = "drafts with its own MTP heads; " if model.info.mtp_layers else ""
    shape = draft.shape if draft is not None else None
    fits = fit_pair(model.shape, shape, n_ctx, memory)
    return HubVerdict("target", fits.ok, f"{'✓' if fits.ok else '✗'} as a target: {own}{_unmarked(fits.text)}")


def _unmarked(text: str) -> str:
    return text.removeprefix("✓ ").removeprefix("✗ ")


@dataclass(frozen=True)
class DraftOffer:
    """The draft that goes with a target: where it is, how it was found, and the verdict on the pair."""

    repo_id: str
    choice: QuantChoice
    model: RemoteModel
    source: str  # "the catalog's pair …" or "same family on the hub"
    ok: bool
    verdict: str

    def line(self) -> str:
        size = f", {format_bytes(self.choice.size)}" if self.choice.size else ""
        return f"{self.repo_id} {self.choice.label}{size} ({self.source}): {self.verdict}"


def params_in_name(name: str) -> int | None:
    """``Qwen2.5-0.5B-Instruct-GGUF`` -> 500_000_000 (the first size in the name), else None."""
    m = _SIZE_IN_NAME.search(name.rsplit("/", 1)[-1])
    return parse_size_label(f"{m.group(1)}{m.group(2).upper()}") if m else None


def family_query(repo_id: str, target: GgufInfo) -> str:
    """What to search the hub for to find smaller models of the target's family (``Qwen2.5``, ``SmolLM2``)."""
    if target.basename:
        return target.basename
    name = repo_id.rsplit("/", 1)[-1]
    m = _SIZE_IN_NAME.search(name)
    return re.sub(r"[-_. ]+$", "", name[: m.start()] if m else name.removesuffix("-GGUF"))


def _draft_choice(choices: list[QuantChoice]) -> QuantChoice | None:
    by_quant = {c.quant: c for c in choices if c.quant}
    return next((by_quant[q] for q in _DRAFT_QUANTS if q in by_quant), choices[0] if choices else None)


def find_draft(
    repo_id: str, target: RemoteModel, *, endpoint: str | None = None, cancel: CancelToken | None = None
) -> DraftOffer | None:
    """The draft for a hub target: the catalog's, when the target's repository is a catalog pair's, else the
    smallest model of its family on the hub whose vocabulary matches (a few repositories' headers are read)."""
    candidates: list[tuple[str, str, str]] = []  # (repo, quant or "", source)
    for pair in load_catalog():
        if not pair.local and pair.draft is not None and pair.target.repo == repo_id:
            candidates.append((pair.draft.repo, pair.draft.quant, f"the catalog's pair {pair.name}"))
    if not candidates:
        wanted = target.info.parameter_count or params_in_name(repo_id) or 0
        hits = search(family_query(repo_id, target.info), endpoint=endpoint, cancel=cancel)
        smaller = []
        for hit in hits:
            params = params_in_name(hit.repo_id)
            if hit.repo_id != repo_id and params is not None and (not wanted or params * 4 <= wanted):
                smaller.append((params, hit.repo_id))
        smaller.sort()
        candidates = [(repo, "", "same family on the hub") for _, repo in smaller[:_DRAFT_CANDIDATES]]
    for repo, quant, source in candidates:
        try:
            choices = list_choices(repo, endpoint=endpoint, cancel=cancel)
            choice = next((c for c in choices if c.quant == quant.upper()), None) if quant else _draft_choice(choices)
            if choice is None:
                continue
            model = read_choice(repo, choice, endpoint=endpoint, cancel=cancel)
        except SpecchatError as exc:
            if cancel is not None and cancel.cancelled:
                raise
            if source.startswith("the catalog"):
                raise SpecchatError(f"the catalog's draft {repo} {quant}: {exc}") from None
            continue
        report = compare(target.info, model.info)
        if report.ok:
            return DraftOffer(repo, choice, model, source, True, f"✓ {report.summary()}")
    return None


Progress = Callable[[str, DownloadProgress], None]  # the role ("target" or "draft") and the event


def download_choice(
    repo_id: str,
    choice: QuantChoice,
    role: str,
    *,
    endpoint: str | None = None,
    cancel: CancelToken | None = None,
    on_progress: Progress | None = None,
    **kwargs: Any,
) -> list[DownloadedFile]:
    """Download every part of ``choice`` (each resumable, as :func:`download.download_file` does; ``kwargs`` go to
    it); the first element is the file to load."""
    report = None if on_progress is None else (lambda event: on_progress(role, event))
    return [
        download_file(repo_id, f.filename, endpoint=endpoint, cancel=cancel, on_progress=report, **kwargs)
        for f in choice.files
    ]
