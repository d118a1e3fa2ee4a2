"""Where a download's bytes go, and how a finished one is laid out as huggingface_hub lays it out.

Two layouts: the hub cache (a blob named by its hash, a snapshot symlink to it,
a ref for a branch name) and a ``local_dir`` (the file itself and a metadata
file beside it). Nothing is replaced that specchat did not make: a snapshot
entry only when it is a symlink into the repo's ``blobs``, a ``local_dir`` file
only when its download metadata exists.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from specchat.core.models import hfcache
from specchat.core.models.download_disk import remove_orphaned_parts
from specchat.core.models.errors import DownloadStorageError

SHA256, GIT_SHA1 = "SHA-256", "git SHA-1"


@dataclass(frozen=True)
class Layout:
    final: Path  # what the caller gets
    partial: Path  # bytes received so far; survives failures
    lock: Path
    blobs: Path | None  # cache layout: the repo's blobs folder
    storage: Path | None  # cache layout: models--org--name
    local_dir: Path | None
    metadata: Path | None  # local_dir layout: commit, etag, time


def expected(etag: str) -> tuple[str | None, str]:
    """(how the bytes can be checked, a key safe for file names) for a checked ETag."""
    if hfcache.SHA256_RE.match(etag):
        return SHA256, etag
    if hfcache.SHA1_RE.match(etag):
        return GIT_SHA1, etag
    return None, "etag-" + hashlib.sha256(etag.encode()).hexdigest()[:40]


def cache_layout(cache_dir: Path, repo_id: str, filename: str, commit: str, key: str) -> Layout:
    storage = hfcache.repo_folder(cache_dir, repo_id)
    return Layout(
        final=hfcache.snapshot_file(storage, commit, filename),
        partial=hfcache.incomplete_file(storage, key),
        lock=hfcache.lock_file(cache_dir, storage, key),
        blobs=hfcache.blobs_folder(storage),
        storage=storage,
        local_dir=None,
        metadata=None,
    )


def local_layout(local_dir: Path, filename: str, key: str) -> Layout:
    return Layout(
        final=hfcache.local_file(local_dir, filename),
        partial=hfcache.local_meta_file(local_dir, filename, f".{key}.incomplete"),
        lock=hfcache.local_meta_file(local_dir, filename, ".lock"),
        blobs=None,
        storage=None,
        local_dir=local_dir,
        metadata=hfcache.local_meta_file(local_dir, filename, ".metadata"),
    )


def is_complete(layout: Layout, etag: str, size: int | None, check: str | None) -> bool:
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


def check_replaceable(layout: Layout) -> None:
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


def finish(layout: Layout, blob_name: str, revision: str, commit: str, etag: str, verified: bool) -> None:
    """Move the checked partial into place and write the pointers huggingface_hub expects.

    In the cache, a blob checked by its size only gets its ``.unverified`` mark
    (before the pointer, so a crash never leaves it looking verified); a
    verified one loses any mark an earlier download left.
    """
    check_replaceable(layout)
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
