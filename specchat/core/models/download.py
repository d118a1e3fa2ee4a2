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
as huggingface_hub does (see :mod:`hfcache`, which also checks every name the
server or the user gives before it becomes a path).

Every wait checks the cancel token at least every :data:`POLL` seconds, whatever
the server does: the metadata call and each body are read on a daemon thread
(a server trickling one byte a second, or never answering, cannot pin the
caller), the body is taken as it arrives (no buffering up to a chunk size), and
waiting for another process's file lock is done in short steps.

Nothing outside the cache (or the chosen ``local_dir``) is written, and nothing
there is replaced that specchat did not make: a snapshot entry is replaced only
when it is a symlink into the repo's ``blobs``; a ``local_dir`` file only when
its download metadata exists.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from specchat.core.cancel import CancelToken
from specchat.core.models import hfcache
from specchat.core.models.errors import (
    ChecksumMismatchError,
    DownloadCancelledError,
    DownloadStorageError,
    HubNetworkError,
    HubNotFoundError,
    HubProtocolError,
    NotEnoughDiskSpaceError,
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
POLL = 0.1  # seconds between cancel checks while waiting on the network or a lock
SHA256, GIT_SHA1 = "SHA-256", "git SHA-1"
UNVERIFIED_NOTE = "the hub gave no SHA-256 for it, only its size was checked"  # said of an unverified file


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
    """Raise NotEnoughDiskSpaceError when ``folder`` has fewer than ``needed`` free bytes."""
    free = free_space(folder)
    if needed > free:
        raise NotEnoughDiskSpaceError(
            f"not enough disk space in {folder}: {what} needs {format_bytes(needed)}, "
            f"only {format_bytes(free)} free; free {format_bytes(needed - free)} or choose another folder"
        )


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (a process of another user counts as alive)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return ctypes.get_last_error() == 5  # access denied: it exists
        code = ctypes.c_ulong()
        try:
            return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphaned_parts(folder: Path, name: str, stale_after: float = 86400.0) -> list[Path]:
    """Delete ``<name>.part<PID>`` files in ``folder`` whose writer is gone; return what was removed.

    A file is orphaned when its PID is not alive, or when it has not been
    written for ``stale_after`` seconds (its PID was reused by another
    process). Resumable downloads (``*.incomplete``) are never touched.
    """
    removed: list[Path] = []
    prefix = name + ".part"
    try:
        candidates = [p for p in Path(folder).iterdir() if p.name.startswith(prefix)]
    except OSError:
        return removed
    now = time.time()
    for path in candidates:
        pid_text = path.name[len(prefix):]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or not path.is_file() or path.is_symlink():
            continue
        try:
            old = now - path.stat().st_mtime > stale_after
            if old or not pid_alive(int(pid_text)):
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


@dataclass(frozen=True)
class _Layout:
    final: Path  # what the caller gets
    partial: Path  # bytes received so far; survives failures
    lock: Path
    blobs: Path | None  # cache layout: the repo's blobs folder
    storage: Path | None  # cache layout: models--org--name
    local_dir: Path | None
    metadata: Path | None  # local_dir layout: commit, etag, time


def _expected(etag: str) -> tuple[str | None, str]:
    """(how the bytes can be checked, a key safe for file names) for a checked ETag."""
    if hfcache.SHA256_RE.match(etag):
        return SHA256, etag
    if hfcache.SHA1_RE.match(etag):
        return GIT_SHA1, etag
    return None, "etag-" + hashlib.sha256(etag.encode()).hexdigest()[:40]


def _cache_layout(cache_dir: Path, repo_id: str, filename: str, commit: str, key: str) -> _Layout:
    storage = hfcache.repo_folder(cache_dir, repo_id)
    return _Layout(
        final=hfcache.snapshot_file(storage, commit, filename),
        partial=hfcache.incomplete_file(storage, key),
        lock=hfcache.lock_file(cache_dir, storage, key),
        blobs=hfcache.blobs_folder(storage), storage=storage, local_dir=None, metadata=None,
    )


def _local_layout(local_dir: Path, filename: str, key: str) -> _Layout:
    return _Layout(
        final=hfcache.local_file(local_dir, filename),
        partial=hfcache.local_meta_file(local_dir, filename, f".{key}.incomplete"),
        lock=hfcache.local_meta_file(local_dir, filename, ".lock"),
        blobs=None, storage=None, local_dir=local_dir,
        metadata=hfcache.local_meta_file(local_dir, filename, ".metadata"),
    )


def _is_complete(layout: _Layout, etag: str, size: int | None, check: str | None) -> bool:
    final = layout.final
    if not final.is_file() or (size is not None and final.stat().st_size != size):
        return False
    if layout.blobs is not None:
        # our pointer into blobs exists only once its blob was checked; a plain file is a no-symlink copy
        if not final.is_symlink():
            return True
        # an unverified download named its blob by its own SHA-256: when the hub now gives a hash, it must agree
        if not hfcache.points_into(final, layout.blobs):
            return False
        return check is None or Path(os.path.realpath(final)).name == etag
    assert layout.metadata is not None
    try:
        lines = layout.metadata.read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 2 and lines[1] == etag


def _check_replaceable(layout: _Layout) -> None:
    """Refuse when something specchat did not make is at the final path (it is never unlinked)."""
    final = layout.final
    if not final.exists() and not final.is_symlink():
        return
    if layout.blobs is not None:
        if hfcache.points_into(final, layout.blobs):
            return
        raise DownloadStorageError(
            f"{final} exists and is not a link into the cache's blobs; move it away and run again"
        )
    assert layout.metadata is not None
    if final.is_file() and not final.is_symlink() and layout.metadata.is_file():
        return  # a file an earlier download put there (its metadata says so)
    raise DownloadStorageError(
        f"{final} already exists and was not downloaded here; move it away or choose another folder"
    )


def _link(final: Path, blob: Path) -> None:
    """Point ``final`` at ``blob`` with a relative symlink (a copy without symlinks), replacing only our pointer."""
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_orphaned_parts(final.parent, "." + final.name)
    tmp = final.with_name(f".{final.name}.part{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        tmp.symlink_to(os.path.relpath(blob, final.parent))
    except OSError:  # no symlinks (Windows without developer mode): keep a copy, as huggingface_hub does
        shutil.copy2(blob, tmp)
    os.replace(tmp, final)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)  # replaces a link at ``path`` rather than writing through it


def _finish(layout: _Layout, blob_name: str, revision: str, commit: str, etag: str, verified: bool) -> None:
    """Move the checked partial into place and write the pointers huggingface_hub expects.

    In the cache, a blob checked by its size only gets its ``.unverified`` mark
    (before the pointer, so a crash never leaves it looking verified); a
    verified one loses any mark an earlier download left.
    """
    _check_replaceable(layout)
    if layout.blobs is None:
        assert layout.metadata is not None
        layout.final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(layout.partial, layout.final)
        _write_atomic(layout.metadata, f"{commit}\n{etag}\n{time.time()}\n")
        return
    assert layout.storage is not None
    blob = hfcache.blob_file(layout.storage, blob_name)
    if layout.partial.exists():
        os.replace(layout.partial, blob)
    mark = hfcache.unverified_mark(layout.storage, blob_name)
    if verified:
        mark.unlink(missing_ok=True)
    else:
        _write_atomic(mark, f"{etag}\n")
    _link(layout.final, blob)
    if revision != commit:
        _write_atomic(hfcache.ref_file(layout.storage, revision), commit)


def _hash_prefix(path: Path, cancel: CancelToken | None) -> Any:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            if cancel is not None and cancel.cancelled:
                raise DownloadCancelledError(f"download of {path.name} cancelled while checking the partial file")
            h.update(block)
    return h


def _git_blob_sha1(path: Path, cancel: CancelToken | None) -> str:
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            if cancel is not None and cancel.cancelled:
                raise DownloadCancelledError(f"download of {path.name} cancelled while checking it")
            h.update(block)
    return h.hexdigest()


@contextmanager
def _hold_lock(path: Path, cancel: CancelToken | None, what: str) -> Iterator[None]:
    """huggingface_hub's file lock, waited for in short steps so a cancel is seen."""
    from filelock import Timeout
    from huggingface_hub.utils import WeakFileLock

    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(WeakFileLock(path, timeout=POLL * 5))
                break
            except Timeout:
                if cancel is not None and cancel.cancelled:
                    raise DownloadCancelledError(f"{what} cancelled while another download of it was running") from None
        yield


class _Body:
    """One GET whose response is read on a daemon thread; the caller waits at most :data:`POLL` at a time.

    When the caller stops (cancel, error), the thread is abandoned: it ends at
    the server's next bytes or at the HTTP read timeout, and never writes.
    """

    def __init__(self, url: str, headers: dict[str, str], timeout: float) -> None:
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=64)
        self._stop = threading.Event()
        self._args = (url, headers, timeout)
        threading.Thread(target=self._run, name="hub-body", daemon=True).start()

    def _run(self) -> None:
        from huggingface_hub.utils import get_session

        url, headers, timeout = self._args
        try:
            with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                self._put("head", response)
                if response.status_code >= 400:
                    return
                for block in response.iter_bytes():  # as the socket delivers it, at most 64 KiB
                    if self._stop.is_set():
                        return
                    self._put("data", block)
            self._put("end", None)
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread by next()
            self._put("error", exc)

    def _put(self, kind: str, value: Any) -> None:
        while not self._stop.is_set():
            try:
                self._items.put((kind, value), timeout=POLL)
                return
            except queue.Full:
                continue

    def next(self, cancel: CancelToken | None, cancelled: Callable[[], Exception], stall: float) -> tuple[str, Any]:
        """The next ("head", response) / ("data", bytes) / ("end", None); raises the reader's error."""
        waited = 0.0
        while True:
            if cancel is not None and cancel.cancelled:
                raise cancelled()
            try:
                kind, value = self._items.get(timeout=POLL)
            except queue.Empty:
                waited += POLL
                if waited > stall:
                    import httpx2

                    raise httpx2.ReadTimeout(f"no answer for {stall:.0f} s") from None
                continue
            if kind == "error":
                raise value
            return kind, value

    def close(self) -> None:
        self._stop.set()


def _pieces(block: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(block), size):
        yield block[i : i + size]


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
    from huggingface_hub.utils import hf_raise_for_status

    partial.parent.mkdir(parents=True, exist_ok=True)
    offset = partial.stat().st_size if partial.exists() else 0
    if size is not None and offset > size:
        partial.unlink()
        offset = 0
    hasher = _hash_prefix(partial, cancel) if offset else hashlib.sha256()
    resumed_from = offset
    started, start_offset = time.monotonic(), offset
    retries = max_retries
    stall = float(constants.HF_HUB_DOWNLOAD_TIMEOUT) + 5.0  # past httpx's own read timeout

    def report() -> None:
        if on_progress is None:
            return
        elapsed = time.monotonic() - started
        speed = (offset - start_offset) / elapsed if elapsed > 0 else 0.0
        eta = (size - offset) / speed if size is not None and speed > 0 else None
        on_progress(DownloadProgress(filename, offset, size, speed, eta, resumed_from))

    def cancelled() -> DownloadCancelledError:
        return DownloadCancelledError(
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
        body = _Body(url, request_headers, constants.HF_HUB_DOWNLOAD_TIMEOUT)
        try:
            _, response = body.next(cancel, cancelled, stall)
            if response.status_code >= 400:
                with hub_errors(endpoint, repo_id, filename):
                    hf_raise_for_status(response)
            with partial.open("ab") as out:
                if offset and response.status_code == 200:  # server ignored Range: start again
                    out.truncate(0)
                    offset = start_offset = 0
                    hasher = hashlib.sha256()
                elif offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
                    raise HubNetworkError(f"{endpoint} answered a resume request for {filename} with the wrong range")
                while (item := body.next(cancel, cancelled, stall))[0] == "data":
                    for piece in _pieces(item[1], chunk_size):
                        if size is not None and offset + len(piece) > size:
                            raise HubProtocolError(
                                f"{endpoint} sent more than the {format_bytes(size)} it announced for {filename}"
                            )
                        out.write(piece)
                        out.flush()  # what was received is on disk, for a resume after a kill
                        hasher.update(piece)
                        offset += len(piece)
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
                time.sleep(min(POLL / 2, retry_wait))
        finally:
            body.close()
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
        meta = call_cancellable(lambda: get_hf_file_metadata(url, token=tok, endpoint=ep), cancel,
                                f"download of {filename}")
    if not meta.etag or not meta.commit_hash:
        raise HubNetworkError(f"{ep} did not send the commit and ETag headers for {repo_id}/{filename}; is it a hub?")
    commit = hfcache.check_commit(meta.commit_hash, f"commit (X-Repo-Commit from {ep})")
    etag = hfcache.check_etag(meta.etag, f"ETag from {ep}")
    size = meta.size
    if size is not None and (not isinstance(size, int) or size < 0):
        raise HubProtocolError(f"{ep} gave an impossible size {size!r} for {repo_id}/{filename}")
    check, key = _expected(etag)
    if local is not None:
        layout = _local_layout(local, filename, key)
    else:
        layout = _cache_layout(cache, repo_id, filename, commit, key)
    try:
        return _fetch(layout, meta.location or url, url, repo_id=repo_id, filename=filename, revision=revision,
                      commit=commit, etag=etag, check=check, size=size, endpoint=ep, token=tok, cancel=cancel,
                      on_progress=on_progress, free_space=free_space, max_retries=max_retries,
                      retry_wait=retry_wait, chunk_size=chunk_size)
    except OSError as exc:
        where = exc.filename or layout.final
        raise DownloadStorageError(
            f"cannot write {repo_id}/{filename} to {where}: {exc.strerror or type(exc).__name__}"
        ) from None


def _fetch(layout: _Layout, location: str, url: str, *, repo_id: str, filename: str, revision: str, commit: str,
           etag: str, check: str | None, size: int | None, endpoint: str, token: str | bool | None,
           cancel: CancelToken | None, on_progress: ProgressCallback | None, free_space: FreeSpace,
           max_retries: int, retry_wait: float, chunk_size: int) -> DownloadedFile:
    from huggingface_hub.utils import build_hf_headers

    if _is_complete(layout, etag, size, check):
        return _present(layout, repo_id, filename, commit, size, etag, check, on_progress)
    _check_replaceable(layout)
    if layout.storage is not None and check is not None:
        blob = hfcache.blob_file(layout.storage, etag)
        if blob.is_file() and (size is None or blob.stat().st_size == size):
            _finish(layout, etag, revision, commit, etag, verified=True)
            return _present(layout, repo_id, filename, commit, size, etag, check, on_progress)

    layout.lock.parent.mkdir(parents=True, exist_ok=True)
    layout.partial.parent.mkdir(parents=True, exist_ok=True)
    with _hold_lock(layout.lock, cancel, f"download of {filename}"):
        have = layout.partial.stat().st_size if layout.partial.exists() else 0
        if size is not None:
            check_disk_space(max(size - have, 0), layout.partial.parent, f"{repo_id}/{filename}", free_space)
        headers = build_hf_headers(token=token, headers={"Accept-Encoding": "identity"})
        with hub_errors(endpoint, repo_id, filename):
            digest, resumed_from = _transfer(
                urljoin(url, location), layout.partial, size=size, headers=headers, filename=filename,
                repo_id=repo_id, endpoint=endpoint, cancel=cancel, on_progress=on_progress,
                max_retries=max_retries, retry_wait=retry_wait, chunk_size=chunk_size,
            )
        _verify(layout.partial, check, etag, digest, repo_id, filename, cancel)
        got_size = layout.partial.stat().st_size
        _finish(layout, etag if check else digest, revision, commit, etag, verified=check is not None)
    return DownloadedFile(
        path=layout.final, repo_id=repo_id, filename=filename, commit=commit, size=got_size,
        sha256=digest, resumed_from=resumed_from, already_present=False, verified_by=check,
    )


def _verify(partial: Path, check: str | None, etag: str, digest: str, repo_id: str, filename: str,
            cancel: CancelToken | None) -> None:
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


def _present(layout: _Layout, repo_id: str, filename: str, commit: str, size: int | None, etag: str,
             check: str | None, on_progress: ProgressCallback | None) -> DownloadedFile:
    real = layout.final.stat().st_size
    if layout.storage is not None and check is not None:
        hfcache.unverified_mark(layout.storage, etag).unlink(missing_ok=True)  # the hub's hash names this blob
    if on_progress is not None:
        on_progress(DownloadProgress(filename, real, size, 0.0, 0.0, real))
    return DownloadedFile(
        path=layout.final, repo_id=repo_id, filename=filename, commit=commit, size=real,
        sha256=etag if check == SHA256 else None, resumed_from=real, already_present=True, verified_by=check,
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
        lambda: list_gguf_files(repo_id, revision=revision, endpoint=endpoint, token=token), cancel,
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
        lambda: list_gguf_files(repo_id, revision=revision, endpoint=endpoint, token=token), cancel,
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
        (kind, download_file(repo_id, f.filename, revision=revision, endpoint=endpoint, token=token, cancel=cancel,
                             **kwargs))
        for kind, f in found
    ]
