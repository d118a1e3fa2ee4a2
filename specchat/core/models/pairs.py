"""A target/draft pair's two files: found in the hub cache, downloaded, and judged together.

``specchat models pair`` and the model picker's Recommended tab both use these
functions; nothing here knows about Qt (the picker runs them in its workers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.core.cancel import CancelToken
from specchat.core.models import hfcache
from specchat.core.models.catalog import CatalogModel, CatalogPair
from specchat.core.models.download import DownloadedFile, DownloadProgress, download_quant, download_sidecars
from specchat.core.models.hub import HubFile, list_gguf_files, pick_quant_files, sidecars_for
from specchat.core.models.info_cache import INFOS, InfoCache
from specchat.core.types import SpecchatError

PairProgress = Callable[[str, DownloadProgress], None]  # the role ("target" or "draft") and the event


@dataclass(frozen=True)
class DownloadedPair:
    """A downloaded pair; each list starts with the file to load (then a split model's parts).

    ``draft`` is empty for a target that drafts with its own MTP heads.
    """

    target: list[DownloadedFile]
    draft: list[DownloadedFile]
    sidecars: list[tuple[str, DownloadedFile]] = field(default_factory=list)  # (kind, file) fetched beside it
    offered: list[tuple[str, str]] = field(default_factory=list)  # (kind, file name) beside it, not fetched

    @property
    def files(self) -> list[DownloadedFile]:
        return [*self.target, *self.draft, *(f for _, f in self.sidecars)]

    def sidecar_text(self) -> str:
        """One line on the target's sidecars: those fetched, or those the repository offers; "" for none."""
        if self.sidecars:
            return "with " + ", ".join(f"{kind} sidecar {f.filename}" for kind, f in self.sidecars)
        if self.offered:
            held = ", ".join(f"a {kind} sidecar ({name})" for kind, name in self.offered)
            return f'its repository also holds {held}: tick "with sidecars" to fetch it'
        return ""

    @property
    def paths(self) -> tuple[str, str]:
        """The target's and the draft's file to load (``""`` when there is no draft file)."""
        return str(self.target[0].path), str(self.draft[0].path) if self.draft else ""


@dataclass(frozen=True)
class PairOnDisk:
    """A pair's two files on this computer, the verdict on them, and which of them are unverified."""

    target: str
    draft: str  # "" when the target drafts with its own MTP heads
    verdict: str
    unverified: tuple[str, ...] = ()  # those of the two whose content no hash vouched for


def downloads(pair: CatalogPair) -> list[tuple[str, CatalogModel]]:
    """``(role, model)`` for each file a pair needs: the target, then the draft when it has one."""
    return [("target", pair.target)] + ([("draft", pair.draft)] if pair.draft is not None else [])


def download_pair(
    pair: CatalogPair,
    *,
    cancel: CancelToken | None = None,
    on_progress: PairProgress | None = None,
    sidecars: bool = False,
    **kwargs: Any,
) -> DownloadedPair:
    """Download a catalog pair's target, then its draft (each resumable); ``kwargs`` go to ``download_quant``.

    The target's repository is then asked for drafter sidecars beside the target file (``mtp-``, ``eagle3-``,
    ``dflash-``, ``dspark-``): ``sidecars`` fetches them (role ``sidecar`` in the progress), otherwise
    they are only named in ``offered``.
    """
    if pair.local:
        raise SpecchatError(f"the {pair.id} pair is built on this computer (`specchat models demo`), not downloaded")
    got: dict[str, list[DownloadedFile]] = {"draft": []}
    for role, model in downloads(pair):
        report = None if on_progress is None else functools.partial(on_progress, role)
        got[role] = download_quant(model.repo, model.quant, cancel=cancel, on_progress=report, **kwargs)
    model_file = got["target"][0].filename
    hub = {k: v for k, v in kwargs.items() if k in ("endpoint", "token")}
    if sidecars:
        report = None if on_progress is None else functools.partial(on_progress, "sidecar")
        fetched = download_sidecars(pair.target.repo, model_file, cancel=cancel, on_progress=report, **kwargs)
        return DownloadedPair(got["target"], got["draft"], fetched)
    offered = [(kind, f.filename) for kind, f in sidecars_for(list_gguf_files(pair.target.repo, **hub), model_file)]
    return DownloadedPair(got["target"], got["draft"], offered=offered)


def cached_quant_file(repo_id: str, quant: str, cache_dir: Path | None = None) -> Path | None:
    """The file to load for ``quant`` of ``repo_id`` if the hub cache holds it complete, else None.

    Looks only at the disk (the snapshot that ``refs/main`` names, its commit
    checked like any other), never at the network.
    """
    try:
        storage = hfcache.repo_folder(cache_dir if cache_dir is not None else hfcache.hf_cache_dir(), repo_id)
        commit = hfcache.read_ref(storage)
        names = hfcache.snapshot_files(storage, commit)
        chosen = pick_quant_files([HubFile(n, None, None) for n in names], quant, repo_id)
        first = chosen[0]
        if first.split is not None and len(chosen) != first.split[1]:
            return None  # a split model with parts missing
        return hfcache.snapshot_file(storage, commit, first.filename)
    except (OSError, UnicodeError, SpecchatError):
        return None


def pair_on_disk(target: str, draft: str) -> PairOnDisk:
    """The verdict on two files and which are unverified (reads two vocabularies: keep off a GUI thread)."""
    unverified = tuple(p for p in (target, draft) if p and hfcache.is_unverified(Path(p)))
    return PairOnDisk(target, draft, compatibility_text(target, draft), unverified)


def find_downloaded(pairs: list[CatalogPair], cache_dir: Path | None = None) -> dict[str, PairOnDisk]:
    """Pairs whose two files are already in the hub cache, by pair id."""
    found: dict[str, PairOnDisk] = {}
    for pair in pairs:
        if pair.local:
            continue
        paths = {role: cached_quant_file(model.repo, model.quant, cache_dir) for role, model in downloads(pair)}
        if all(path is not None for path in paths.values()):
            found[pair.id] = pair_on_disk(str(paths["target"]), str(paths.get("draft") or ""))
    return found


def compatibility_text(target: str, draft: str, infos: InfoCache = INFOS) -> str:
    """A one-line verdict on a pair, before it is loaded (reads GGUF vocabularies through ``infos``: keep it off
    a GUI thread)."""
    if not target:
        return "choose a target model"
    t = Path(target).expanduser()
    if not t.is_file():
        return "target file not found"
    if not draft:
        return _no_draft_verdict(t, infos)
    d = Path(draft).expanduser()
    if not d.is_file():
        return "draft file not found"
    return _verdict(t, d, infos)


def short_verdict(verdict: str) -> str:
    """The verdict without its reason, for a narrow column: ``✓ compatible``, ``✗ incompatible`` ..."""
    head = verdict.split(":", 1)[0]
    return head.replace("compatible-with-warnings", "compatible, with warnings")


def _no_draft_verdict(target: Path, infos: InfoCache) -> str:
    """A target alone drafts with its own MTP heads when it has them, else by lookup."""
    try:
        heads = infos.get(target).mtp_layers
    except Exception as exc:  # noqa: BLE001 - a broken file gets a one-line verdict
        return f"cannot check: {exc}"
    if heads:
        return f"✓ drafts with its own MTP heads ({heads} layer{'s' if heads > 1 else ''}): no draft model needed"
    return "no draft: n-gram drafting or plain decoding only"


def _verdict(target: Path, draft: Path, infos: InfoCache) -> str:
    """A head file (EAGLE-3, DFlash, DSpark) is judged as a head: the target's vocabulary, layers and width
    (:func:`heads.check_head`); a draft model by its vocabulary against the target's (:func:`compat.compare`)."""
    from specchat.core.models.compat import compare
    from specchat.core.models.heads import check_head, read_head

    try:
        draft_info = infos.get(draft)
        head = read_head(draft, draft_info)
        if head is not None:
            return check_head(target, head, infos.get(target)).line()
        report = compare(infos.get(target), draft_info)
    except Exception as exc:  # noqa: BLE001 - a broken file gets a one-line verdict
        return f"cannot check: {exc}"
    mark = "✓" if report.ok else "✗"
    return f"{mark} {report.summary()}"
