"""Hub downloads with progress events, cancel, resume across attempts, and a checksum at the end.

Why not ``hf_hub_download``: in the installed huggingface_hub (2.4) the body is
written to a per-call temporary file (``<etag>.<random>.incomplete``) that is
deleted in a ``finally`` block whenever the call fails or is interrupted, so a
cancelled or crashed download always restarts from byte 0. Resuming across
attempts needs a partial file that survives, so the transfer below is our own:
the library still does the metadata call (``hf_hub_url`` +
``get_hf_file_metadata``: commit, ETag/X-Linked-Etag, size, CDN location), the
HTTP client (``get_session``) and the error mapping (``hf_raise_for_status``);
we do a ranged GET into a fixed-name partial file and lay the result out exactly
as huggingface_hub does, so its own tools and ``scan_cache_dir`` see it:

* cache (default): ``models--org--name/blobs/<etag>`` with the partial at
  ``blobs/<etag>.incomplete``, ``snapshots/<commit>/<filename>`` a relative
  symlink to the blob, and ``refs/<revision>`` holding the commit;
* ``local_dir``: the file at ``local_dir/<filename>``, the partial and the
  metadata (commit, etag, time) under ``local_dir/.cache/huggingface/download/``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specchat.core.cancel import CancelToken
from specchat.core.models.errors import (
    ChecksumMismatch,
    DownloadCancelled,
    HubNetworkError,
    NotEnoughDiskSpace,
)
from specchat.core.models.hub import (
    hf_cache_dir,
    hub_errors,
    list_gguf_files,
    pick_quant_files,
    repo_cache_folder,
    resolve_endpoint,
    resolve_token,
)

CHUNK_SIZE = 1 << 20
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report: bytes on disk so far, the total, and this attempt's rate."""

    filename: str
    done: int
    total: int | None
    speed: float  # bytes per second since this attempt started
    eta: float | None  # seconds left at that speed, None when unknown
    resumed_from: int  # bytes that were already on disk when this attempt began


@dataclass(frozen=True)
class DownloadedFile:
    """A file that is complete and verified on disk."""

    path: Path
    repo_id: str
    filename: str
    commit: str
    size: int
    sha256: str | None  # None for small non-LFS files (checked against their git blob id)
    resumed_from: int
    already_present: bool


ProgressCallback = Callable[[DownloadProgress], None]
FreeSpace = Callable[[Path], int]


def disk_free(path: Path) -> int:
    """Free bytes on the filesystem holding ``path`` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def check_disk_space(needed: int, folder: Path, what: str, free_space: FreeSpace = disk_free) -> None:
    """Raise NotEnoughDiskSpace when ``folder`` has fewer than ``needed`` free bytes."""
    free = free_space(folder)
    if needed > free:
        raise NotEnoughDiskSpace(
            f"not enough disk space in {folder}: {what} needs {format_bytes(needed)}, "
            f"only {format_bytes(free)} free; free {format_bytes(needed - free)} or choose another folder"
        )


@dataclass(frozen=True)
class _Layout:
    final: Path  # what the caller gets
    partial: Path  # bytes received so far; survives failures
    lock: Path
    blob: Path | None  # cache layout only


def _cache_layout(cache_dir: Path, repo_id: str, filename: str, commit: str, etag: str) -> _Layout:
    storage = repo_cache_folder(cache_dir, repo_id)
    blob = storage / "blobs" / etag
    return _Layout(
        final=storage / "snapshots" / commit / filename,
        partial=blob.with_name(etag + ".incomplete"),
        lock=cache_dir / ".locks" / storage.name / f"{etag}.lock",
        blob=blob,
    )


def _local_layout(local_dir: Path, filename: str, etag: str) -> _Layout:
    meta = local_dir / ".cache" / "huggingface" / "download"
    return _Layout(
        final=local_dir / filename,
        partial=meta / f"{filename}.{etag}.incomplete",
        lock=meta / f"{filename}.lock",
        blob=None,
    )


def _local_metadata(local_dir: Path, filename: str) -> Path:
    return local_dir / ".cache" / "huggingface" / "download" / f"{filename}.metadata"


def _is_complete(layout: _Layout, local_dir: Path | None, filename: str, etag: str, size: int | None) -> bool:
    if not layout.final.is_file():
        return False
    if size is not None and layout.final.stat().st_size != size:
        return False
    if local_dir is None:
        return True  # a cache pointer exists only once its blob was verified
    meta = _local_metadata(local_dir, filename)
    try:
        lines = meta.read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 2 and lines[1] == etag


def _finish(layout: _Layout, cache_dir: Path, repo_id: str, revision: str, commit: str,
            local_dir: Path | None, filename: str, etag: str) -> None:
    """Move the verified partial into place and write the pointers huggingface_hub expects."""
    if layout.blob is None:
        assert local_dir is not None
        layout.final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(layout.partial, layout.final)
        _local_metadata(local_dir, filename).write_text(f"{commit}\n{etag}\n{time.time()}\n")
        return
    if layout.partial.exists():
        os.replace(layout.partial, layout.blob)
    layout.final.parent.mkdir(parents=True, exist_ok=True)
    layout.final.unlink(missing_ok=True)
    try:
        layout.final.symlink_to(os.path.relpath(layout.blob, layout.final.parent))
    except OSError:  # no symlinks (Windows without developer mode): keep a copy, as huggingface_hub does
        shutil.copy2(layout.blob, layout.final)
    if revision != commit:
        refs = repo_cache_folder(cache_dir, repo_id) / "refs" / revision
        refs.parent.mkdir(parents=True, exist_ok=True)
        refs.write_text(commit)


def _hash_prefix(path: Path, cancel: CancelToken | None) -> hashlib._Hash:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK_SIZE * 4):
            if cancel is not None and cancel.cancelled:
                raise DownloadCancelled(f"download of {path.name} cancelled while checking the partial file")
            h.update(block)
    return h


def _git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        while block := f.read(CHUNK_SIZE):
            h.update(block)
    return h.hexdigest()


def _transfer(
    url: str,
    partial: Path,
    *,
    size: int | None,
    headers: dict[str, str],
    filename: str,
    repo_id: str,
    endpoint: str,
    cancel: CancelToken | None,
    on_progress: ProgressCallback | None,
    max_retries: int,
    retry_wait: float,
    chunk_size: int,
) -> tuple[str, int]:
    """Append the missing bytes to ``partial`` with ranged GETs; return (sha256, bytes there before)."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session, hf_raise_for_status

    partial.parent.mkdir(parents=True, exist_ok=True)
    offset = partial.stat().st_size if partial.exists() else 0
    if size is not None and offset > size:
        partial.unlink()
        offset = 0
    hasher = _hash_prefix(partial, cancel) if offset else hashlib.sha256()
    resumed_from = offset
    started, start_offset = time.monotonic(), offset
    retries = max_retries

    def report() -> None:
        if on_progress is None:
            return
        elapsed = time.monotonic() - started
        speed = (offset - start_offset) / elapsed if elapsed > 0 else 0.0
        eta = (size - offset) / speed if size is not None and speed > 0 else None
        on_progress(DownloadProgress(filename, offset, size, speed, eta, resumed_from))

    def cancelled() -> DownloadCancelled:
        return DownloadCancelled(
            f"download of {filename} cancelled at {format_bytes(offset)}"
            + (f" of {format_bytes(size)}" if size else "")
            + "; run it again to resume"
        )

    report()
    while size is None or offset < size:
        if cancel is not None and cancel.cancelled:
            raise cancelled()
        request_headers = dict(headers)
        if offset:
            request_headers["Range"] = f"bytes={offset}-"
        try:
            with get_session().stream(
                "GET", url, headers=request_headers, follow_redirects=True, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    with hub_errors(endpoint, repo_id, filename):
                        hf_raise_for_status(response)
                with partial.open("ab") as out:
                    if offset and response.status_code == 200:  # server ignored Range: start again
                        out.truncate(0)
                        offset = start_offset = 0
                        hasher = hashlib.sha256()
                    elif offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
                        raise HubNetworkError(f"{endpoint} answered a resume request for {filename} with the wrong range")
                    for chunk in response.iter_bytes(chunk_size):
                        out.write(chunk)
                        hasher.update(chunk)
                        offset += len(chunk)
                        retries = max_retries  # progress was made: the retry budget starts over
                        report()
                        if cancel is not None and cancel.cancelled:
                            raise cancelled()
            if size is None:
                break
            if offset < size:
                raise httpx2.RemoteProtocolError("stream ended early")
        except httpx2.TransportError as exc:
            if retries <= 0:
                raise HubNetworkError(
                    f"lost the connection to {endpoint} after {format_bytes(offset)}"
                    + (f" of {format_bytes(size)}" if size else "")
                    + f" of {filename} ({type(exc).__name__}); run again to resume"
                ) from None
            retries -= 1
            deadline = time.monotonic() + retry_wait
            while time.monotonic() < deadline:
                if cancel is not None and cancel.cancelled:
                    raise cancelled() from None
                time.sleep(min(0.05, retry_wait))
    return hasher.hexdigest(), resumed_from


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
    """Download one file of a model repo, resuming a partial one, and verify it.

    Into the hub cache (``cache_dir``, default: ``HF_HUB_CACHE`` / ``HF_HOME/hub``)
    unless ``local_dir`` is given. A cancel or a lost connection leaves the bytes
    received in the partial file, and the next call asks only for the rest.
    A dropped connection is retried (with a Range request) up to ``max_retries``
    times in a row without progress.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    ep = resolve_endpoint(endpoint)
    revision = revision or "main"
    tok = resolve_token(token)
    cache = Path(cache_dir) if cache_dir is not None else hf_cache_dir()
    with hub_errors(ep, repo_id, filename):
        url = hf_hub_url(repo_id, filename, revision=revision, endpoint=ep)
        meta = get_hf_file_metadata(url, token=tok, endpoint=ep)
    if not meta.etag or not meta.commit_hash:
        raise HubNetworkError(f"{ep} did not send the commit and ETag headers for {repo_id}/{filename}; is it a hub?")
    etag, commit, size = meta.etag, meta.commit_hash, meta.size

    layout = (
        _local_layout(Path(local_dir), filename, etag)
        if local_dir is not None
        else _cache_layout(cache, repo_id, filename, commit, etag)
    )
    if _is_complete(layout, local_dir, filename, etag, size):
        return _present(layout, repo_id, filename, commit, size, etag, on_progress)
    if layout.blob is not None and layout.blob.is_file() and (size is None or layout.blob.stat().st_size == size):
        _finish(layout, cache, repo_id, revision, commit, local_dir, filename, etag)
        return _present(layout, repo_id, filename, commit, size, etag, on_progress)

    layout.lock.parent.mkdir(parents=True, exist_ok=True)
    layout.partial.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(layout.lock):
        have = layout.partial.stat().st_size if layout.partial.exists() else 0
        if size is not None:
            check_disk_space(max(size - have, 0), layout.partial.parent, f"{repo_id}/{filename}", free_space)
        headers = build_hf_headers(token=tok, headers={"Accept-Encoding": "identity"})
        digest, resumed_from = _transfer(
            meta.location, layout.partial, size=size, headers=headers, filename=filename, repo_id=repo_id,
            endpoint=ep, cancel=cancel, on_progress=on_progress, max_retries=max_retries,
            retry_wait=retry_wait, chunk_size=chunk_size,
        )
        _verify(layout.partial, etag, digest, repo_id, filename)
        got_size = layout.partial.stat().st_size
        _finish(layout, cache, repo_id, revision, commit, local_dir, filename, etag)
    return DownloadedFile(
        path=layout.final, repo_id=repo_id, filename=filename, commit=commit, size=got_size,
        sha256=digest, resumed_from=resumed_from, already_present=False,
    )


def _verify(partial: Path, etag: str, digest: str, repo_id: str, filename: str) -> None:
    """SHA-256 for LFS files (their ETag), git blob SHA-1 for small files; delete on mismatch."""
    if _SHA256_RE.match(etag):
        got, kind = digest, "SHA-256"
    elif _SHA1_RE.match(etag):
        got, kind = _git_blob_sha1(partial), "git SHA-1"
    else:
        return  # an ETag that is not a content hash: only the size was checked
    if got != etag:
        partial.unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{repo_id}/{filename} failed its {kind} check (hub says {etag[:12]}..., got {got[:12]}...); "
            "the file was deleted: download it again"
        )


def _present(layout: _Layout, repo_id: str, filename: str, commit: str, size: int | None, etag: str,
             on_progress: ProgressCallback | None) -> DownloadedFile:
    real = layout.final.stat().st_size
    if on_progress is not None:
        on_progress(DownloadProgress(filename, real, size, 0.0, 0.0, real))
    return DownloadedFile(
        path=layout.final, repo_id=repo_id, filename=filename, commit=commit, size=real,
        sha256=etag if _SHA256_RE.match(etag) else None, resumed_from=real, already_present=True,
    )


def download_quant(
    repo_id: str,
    quant: str,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    **kwargs: object,
) -> list[DownloadedFile]:
    """Download the GGUF file (or all parts of a split one) of ``quant`` in ``repo_id``.

    The file name is resolved from the repo's listing (see ``hub.pick_quant_files``);
    other keyword arguments go to :func:`download_file`. The first element is
    the file to load.
    """
    files = list_gguf_files(repo_id, revision=revision, endpoint=endpoint, token=token)
    chosen = pick_quant_files(files, quant, repo_id)
    return [
        download_file(repo_id, f.filename, revision=revision, endpoint=endpoint, token=token, **kwargs)  # type: ignore[arg-type]
        for f in chosen
    ]
