"""Hub downloads with progress events, cancel, resume across attempts, and a checksum at the end.

Why not ``hf_hub_download``: in the installed huggingface_hub (2.4) the body is
written to a per-call temporary file (``<etag>.<random>.incomplete``) that is
deleted in a ``finally`` block whenever the call fails or is interrupted, so a
cancelled or crashed download always restarts from byte 0. Resuming across
attempts needs a partial file that survives, so the transfer is our own
(download_transfer.py): the library still does the metadata call
(``hf_hub_url`` + ``get_hf_file_metadata``: commit, ETag/X-Linked-Etag, size,
CDN location), the HTTP client (``get_session``) and the error mapping
(``hf_raise_for_status``); we do a ranged GET into a fixed-name partial file and
lay the result out exactly as huggingface_hub does (download_layout.py, and
:mod:`hfcache`, which also checks every name the server or the user gives
before it becomes a path).

Every wait checks the cancel token at least every :data:`POLL` seconds,
whatever the server does (the metadata call, each body, another process's file
lock). Nothing outside the cache (or the chosen ``local_dir``) is written, and
nothing there is replaced that specchat did not make. Free space and leftover
``.part`` files: download_disk.py. This module ties them together: one file
(:func:`download_file`), a quant's files, a model's drafter sidecars.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from specchat.core.cancel import CancelToken
from specchat.core.models import hfcache
from specchat.core.models.download_disk import (
    FreeSpace,
    check_disk_space,
    disk_free,
    format_bytes,
    pid_alive,
    remove_orphaned_parts,
)
from specchat.core.models.download_layout import (
    GIT_SHA1,
    SHA256,
    Layout,
    cache_layout,
    check_replaceable,
    expected,
    finish,
    is_complete,
    local_layout,
)
from specchat.core.models.download_transfer import POLL, DownloadProgress, ProgressCallback, hold_lock, transfer
from specchat.core.models.errors import (
    ChecksumMismatchError,
    DownloadCancelledError,
    DownloadStorageError,
    HubNetworkError,
    HubNotFoundError,
    HubProtocolError,
)
from specchat.core.models.hub import (
    call_cancellable,
    hub_errors,
    list_gguf_files,
    pick_quant_files,
    resolve_endpoint,
    resolve_token,
    sidecars_for,
)

CHUNK_SIZE = 64 * 1024  # largest piece written (and reported) at a time
UNVERIFIED_NOTE = "the hub gave no SHA-256 for it, only its size was checked"  # said of an unverified file


@dataclass(frozen=True)
class DownloadedFile:
    """A file that is complete on disk, checked against the hub's hash when the hub gave one."""

    path: Path
    repo_id: str
    filename: str
    commit: str
    size: int
    sha256: str | None  # None for small non-LFS files (checked against their git blob id)
    resumed_from: int
    already_present: bool
    verified_by: str | None  # "SHA-256", "git SHA-1", or None: the hub's ETag is no hash, only the size was checked

    @property
    def verified(self) -> bool:
        return self.verified_by is not None


def _git_blob_sha1(path: Path, cancel: CancelToken | None) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            if cancel is not None and cancel.cancelled:
                raise DownloadCancelledError(f"download of {path.name} cancelled while checking it")
            h.update(block)
    return h.hexdigest()


def download_file(
    repo_id: str,
    filename: str,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    local_dir: Path | None = None,
    cache_dir: Path | None = None,
    cancel: CancelToken | None = None,
    on_progress: ProgressCallback | None = None,
    free_space: FreeSpace = disk_free,
    max_retries: int = 5,
    retry_wait: float = 1.0,
    chunk_size: int = CHUNK_SIZE,
) -> DownloadedFile:
    """Download one file of a model repo, resuming a partial one, and check it.

    Into the hub cache (``cache_dir``, default: ``HF_HUB_CACHE`` / ``HF_HOME/hub``)
    unless ``local_dir`` is given. A cancel or a lost connection leaves the bytes
    received in the partial file, and the next call asks only for the rest.
    A dropped connection is retried (with a Range request) up to ``max_retries``
    times in a row without progress. The file name, revision, commit and ETag
    are checked before any path is built (:mod:`hfcache`); a file whose ETag is
    no hash comes back with ``verified_by=None``.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    ep = resolve_endpoint(endpoint)
    revision = revision or "main"
    hfcache.check_relative_path(filename, "file name")
    hfcache.check_relative_path(revision, "revision")
    tok = resolve_token(token)
    cache = Path(cache_dir) if cache_dir is not None else hfcache.hf_cache_dir()
    local = hfcache.check_local_dir(local_dir) if local_dir is not None else None
    if local is None:
        hfcache.repo_folder(cache, repo_id)
    with hub_errors(ep, repo_id, filename):
        url = hf_hub_url(repo_id, filename, revision=revision, endpoint=ep)
        meta = call_cancellable(
            lambda: get_hf_file_metadata(url, token=tok, endpoint=ep), cancel, f"download of {filename}"
        )
    if not meta.etag or not meta.commit_hash:
        raise HubNetworkError(f"{ep} did not send the commit and ETag headers for {repo_id}/{filename}; is it a hub?")
    commit = hfcache.check_commit(meta.commit_hash, f"commit (X-Repo-Commit from {ep})")
    etag = hfcache.check_etag(meta.etag, f"ETag from {ep}")
    size = meta.size
    if size is not None and (not isinstance(size, int) or size < 0):
        raise HubProtocolError(f"{ep} gave an impossible size {size!r} for {repo_id}/{filename}")
    check, key = expected(etag)
    if local is not None:
        layout = local_layout(local, filename, key)
    else:
        layout = cache_layout(cache, repo_id, filename, commit, key)
    try:
        return _fetch(
            layout,
            meta.location or url,
            url,
            repo_id=repo_id,
            filename=filename,
            revision=revision,
            commit=commit,
            etag=etag,
            check=check,
            size=size,
            endpoint=ep,
            token=tok,
            cancel=cancel,
            on_progress=on_progress,
            free_space=free_space,
            max_retries=max_retries,
            retry_wait=retry_wait,
            chunk_size=chunk_size,
        )
    except OSError as exc:
        where = exc.filename or layout.final
        raise DownloadStorageError(
            f"cannot write {repo_id}/{filename} to {where}: {exc.strerror or type(exc).__name__}"
        ) from None


def _fetch(
    layout: Layout,
    location: str,
    url: str,
    *,
    repo_id: str,
    filename: str,
    revision: str,
    commit: str,
    etag: str,
    check: str | None,
    size: int | None,
    endpoint: str,
    token: str | bool | None,
    cancel: CancelToken | None,
    on_progress: ProgressCallback | None,
    free_space: FreeSpace,
    max_retries: int,
    retry_wait: float,
    chunk_size: int,
) -> DownloadedFile:
    from huggingface_hub.utils import build_hf_headers

    if is_complete(layout, etag, size, check):
        return _present(layout, repo_id, filename, commit, size, etag, check, on_progress)
    check_replaceable(layout)
    if layout.storage is not None and check is not None:
        blob = hfcache.blob_file(layout.storage, etag)
        if blob.is_file() and (size is None or blob.stat().st_size == size):
            finish(layout, etag, revision, commit, etag, verified=True)
            return _present(layout, repo_id, filename, commit, size, etag, check, on_progress)

    layout.lock.parent.mkdir(parents=True, exist_ok=True)
    layout.partial.parent.mkdir(parents=True, exist_ok=True)
    with hold_lock(layout.lock, cancel, f"download of {filename}"):
        have = layout.partial.stat().st_size if layout.partial.exists() else 0
        if size is not None:
            check_disk_space(max(size - have, 0), layout.partial.parent, f"{repo_id}/{filename}", free_space)
        headers = build_hf_headers(token=token, headers={"Accept-Encoding": "identity"})
        with hub_errors(endpoint, repo_id, filename):
            digest, resumed_from = transfer(
                urljoin(url, location),
                layout.partial,
                size=size,
                headers=headers,
                filename=filename,
                repo_id=repo_id,
                endpoint=endpoint,
                cancel=cancel,
                on_progress=on_progress,
                max_retries=max_retries,
                retry_wait=retry_wait,
                chunk_size=chunk_size,
            )
        _verify(layout.partial, check, etag, digest, repo_id, filename, cancel)
        got_size = layout.partial.stat().st_size
        finish(layout, etag if check else digest, revision, commit, etag, verified=check is not None)
    return DownloadedFile(
        path=layout.final,
        repo_id=repo_id,
        filename=filename,
        commit=commit,
        size=got_size,
        sha256=digest,
        resumed_from=resumed_from,
        already_present=False,
        verified_by=check,
    )


def _verify(
    partial: Path, check: str | None, etag: str, digest: str, repo_id: str, filename: str, cancel: CancelToken | None
) -> None:
    """SHA-256 for LFS files (their ETag), git blob SHA-1 for small files; delete on mismatch."""
    if check is None:
        return  # the ETag is no content hash: only the size was checked, and the result says so
    got = digest if check == SHA256 else _git_blob_sha1(partial, cancel)
    if got != etag:
        partial.unlink(missing_ok=True)
        raise ChecksumMismatchError(
            f"{repo_id}/{filename} failed its {check} check (hub says {etag[:12]}..., got {got[:12]}...); "
            "the file was deleted: download it again"
        )


def _present(
    layout: Layout,
    repo_id: str,
    filename: str,
    commit: str,
    size: int | None,
    etag: str,
    check: str | None,
    on_progress: ProgressCallback | None,
) -> DownloadedFile:
    real = layout.final.stat().st_size
    if layout.storage is not None and check is not None:
        hfcache.unverified_mark(layout.storage, etag).unlink(missing_ok=True)  # the hub's hash names this blob
    if on_progress is not None:
        on_progress(DownloadProgress(filename, real, size, 0.0, 0.0, real))
    return DownloadedFile(
        path=layout.final,
        repo_id=repo_id,
        filename=filename,
        commit=commit,
        size=real,
        sha256=etag if check == SHA256 else None,
        resumed_from=real,
        already_present=True,
        verified_by=check,
    )


def download_quant(
    repo_id: str,
    quant: str,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    cancel: CancelToken | None = None,
    **kwargs: Any,
) -> list[DownloadedFile]:
    """Download the GGUF file (or all parts of a split one) of ``quant`` in ``repo_id``.

    The file name is resolved from the repo's listing (see ``hub.pick_quant_files``);
    other keyword arguments go to :func:`download_file`. The first element is
    the file to load.
    """
    files = call_cancellable(
        lambda: list_gguf_files(repo_id, revision=revision, endpoint=endpoint, token=token),
        cancel,
        f"listing of {repo_id}",
    )
    chosen = pick_quant_files(files, quant, repo_id)
    return [
        download_file(repo_id, f.filename, revision=revision, endpoint=endpoint, token=token, cancel=cancel, **kwargs)
        for f in chosen
    ]


def download_sidecars(
    repo_id: str,
    model: str,
    *,
    kinds: Collection[str] | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    cancel: CancelToken | None = None,
    **kwargs: Any,
) -> list[tuple[str, DownloadedFile]]:
    """Download the drafter sidecars that go with ``model`` in ``repo_id`` (``mtp-``, ``eagle3-``, ``dflash-``,
    ``dspark-`` files beside it, as ``llama-server -hf`` picks them); ``kinds`` limits them (None: all).

    A kind asked for that the repository lacks is a one-line HubNotFoundError naming those it has.
    Returns ``(kind, file)`` pairs; other keyword arguments go to :func:`download_file`.
    """
    files = call_cancellable(
        lambda: list_gguf_files(repo_id, revision=revision, endpoint=endpoint, token=token),
        cancel,
        f"listing of {repo_id}",
    )
    found = sidecars_for(files, model)
    if kinds is not None:
        missing = sorted(set(kinds) - {kind for kind, _ in found})
        if missing:
            have = ", ".join(f"{kind} ({f.filename})" for kind, f in found) or "none"
            raise HubNotFoundError(
                f"no {'/'.join(missing)} sidecar beside {model} in {repo_id} (sidecars there: {have})"
            )
        found = [(kind, f) for kind, f in found if kind in kinds]
    return [
        (
            kind,
            download_file(
                repo_id, f.filename, revision=revision, endpoint=endpoint, token=token, cancel=cancel, **kwargs
            ),
        )
        for kind, f in found
    ]


__all__ = [
    "CHUNK_SIZE",
    "GIT_SHA1",
    "POLL",
    "SHA256",
    "UNVERIFIED_NOTE",
    "DownloadProgress",
    "DownloadedFile",
    "FreeSpace",
    "ProgressCallback",
    "check_disk_space",
    "disk_free",
    "download_file",
    "download_quant",
    "download_sidecars",
    "format_bytes",
    "pid_alive",
    "remove_orphaned_parts",
]
