"""GGUF files already on disk: the hub cache, specchat's models folder, user folders, other apps' folders.

Metadata is read once per file with ``gguf.GGUFReader`` and kept in a JSON
index under ``paths.cache_dir()``, keyed by path and checked against size and
mtime, so a rescan only stats files. Files that are gone drop out of the index.
Whether a downloaded file is unverified (no content hash was known) is asked of
:mod:`hfcache` on every scan: it can change while the file stays the same.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.core import paths
from specchat.core.jsonfile import UnreadableFileError, read_json
from specchat.core.models import hfcache
from specchat.core.models.ggufmeta import GgufInfo, read_gguf_info
from specchat.core.models.heads import HeadInfo, heads_beside, read_head
from specchat.core.types import SpecchatError

log = logging.getLogger(__name__)

INDEX_FILENAME = "gguf-index.json"
INDEX_VERSION = 1
_LATER_SHARD_RE = re.compile(r"-(\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class ModelRoot:
    """A folder to search and where it comes from.

    The source is one of ``hf-cache``, ``specchat``, ``user``, ``lm-studio`` and ``llama.cpp``.
    """

    path: Path
    source: str


@dataclass(frozen=True)
class LibraryEntry:
    info: GgufInfo
    source: str
    repo_id: str | None  # for hub-cache files
    unverified: bool = False  # downloaded with no content hash to check it against
    head: HeadInfo | None = None  # what drafts from this file when it is a head (EAGLE-3, DFlash, DSpark, MTP)
    sidecars: tuple[Path, ...] = ()  # heads found beside this target on disk (its folder or hub snapshot)

    @property
    def path(self) -> Path:
        return self.info.path

    @property
    def what(self) -> str:
        """``EAGLE-3 head for Llama 3.1 8B`` for a head; for a target with heads beside it, which; else ""."""
        if self.head is not None:
            return self.head.label
        if self.sidecars:
            return "with " + ", ".join(p.name for p in self.sidecars) + " beside it"
        return ""

    def to_json(self) -> dict[str, object]:
        return {
            **self.info.to_json(),
            "source": self.source,
            "repo_id": self.repo_id,
            "unverified": self.unverified,
            "head": None if self.head is None else self.head.to_json(),
            "sidecars": [str(p) for p in self.sidecars],
        }


@dataclass
class ScanResult:
    entries: list[LibraryEntry]
    read: int = 0  # files whose metadata was read this time
    cached: int = 0  # files answered from the index
    failed: list[str] = field(default_factory=list)  # one line per unreadable file
    seconds: float = 0.0


def default_roots(extra_dirs: Sequence[Path | str] = ()) -> list[ModelRoot]:
    """Every place specchat looks, existing or not: ``extra_dirs`` and ``SPECCHAT_MODEL_DIRS`` are user folders."""
    home = Path.home()
    roots = [ModelRoot(hfcache.hf_cache_dir(), "hf-cache"), ModelRoot(paths.models_dir(), "specchat")]
    env_dirs = [d for d in os.environ.get("SPECCHAT_MODEL_DIRS", "").split(os.pathsep) if d]
    roots += [ModelRoot(Path(d).expanduser(), "user") for d in [*extra_dirs, *env_dirs]]
    roots += [
        ModelRoot(home / ".lmstudio" / "models", "lm-studio"),
        ModelRoot(home / ".cache" / "lm-studio" / "models", "lm-studio"),
        ModelRoot(Path(os.environ.get("LLAMA_CACHE") or home / ".cache" / "llama.cpp").expanduser(), "llama.cpp"),
    ]
    return roots


def _is_listed_gguf(name: str) -> bool:
    lower = name.lower()
    if not lower.endswith(".gguf") or lower.startswith("mmproj"):
        return False
    m = _LATER_SHARD_RE.search(name)
    return m is None or int(m.group(1)) == 1  # a split model is listed by its first part


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if _is_listed_gguf(name):
                yield Path(folder) / name


def index_path() -> Path:
    return paths.cache_dir() / INDEX_FILENAME


def _load_index(path: Path) -> dict[str, Any]:
    """The index's records by path (each checked when used: :func:`_cached_record`); {} when missing or unreadable."""
    try:
        data = read_json(path)
    except FileNotFoundError:
        return {}
    except UnreadableFileError as exc:
        log.warning("model index unreadable: %s; rebuilt", exc)
        return {}
    entries = data.get("files") if isinstance(data, dict) and data.get("version") == INDEX_VERSION else None
    if not isinstance(entries, dict):
        log.warning("model index %s is not a version %d index; rebuilt", path, INDEX_VERSION)
        return {}
    return entries


def _cached_record(record: object, st: os.stat_result, index: Path, key: str) -> dict[str, Any] | None:
    """``record`` if it describes the file as it is now (size and mtime) and reads back whole; else None."""
    if record is None:
        return None
    try:
        if not isinstance(record, dict) or not all(type(record.get(k)) is int for k in ("size", "mtime_ns")):
            raise ValueError("not a size and a time")
        if record["size"] != st.st_size or record["mtime_ns"] != st.st_mtime_ns:
            return None  # the file changed since
        if "error" in record:
            if not isinstance(record["error"], str):
                raise ValueError("an error that is no text")
        elif GgufInfo.from_json(record.get("info")).path != Path(key):
            raise ValueError("it describes another file")
    except ValueError as exc:
        log.warning("model index %s: the entry for %s is damaged (%s); read again", index, key, exc)
        return None
    return record


def _save_index(path: Path, files: dict[str, dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": INDEX_VERSION, "files": files}), encoding="utf-8")
    os.replace(tmp, path)


def with_files(entries: list[LibraryEntry], paths: Iterable[str | Path], source: str = "in use") -> list[LibraryEntry]:
    """``entries`` plus the GGUF files in ``paths`` that no scanned folder holds (a loaded model elsewhere).

    A file that cannot be read is left out: the library lists what it can describe.
    """
    known = {e.path.resolve() for e in entries}
    out = list(entries)
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_file() or path.resolve() in known:
            continue
        try:
            out.append(LibraryEntry(read_gguf_info(path), source, None))
        except SpecchatError as exc:
            log.info("not listing %s: %s", path, exc)
        else:
            known.add(path.resolve())
    return out


def pair_heads(entries: list[LibraryEntry], failed: list[str] | None = None) -> list[LibraryEntry]:
    """``entries`` with each head described and each target given the heads found beside it on disk.

    A head is read again from its header (a few KB) on every scan; only head files pay that. A head whose
    metadata cannot be read is left as an ordinary file, with one line in ``failed``.
    """
    heads: dict[Path, HeadInfo] = {}
    out: list[LibraryEntry] = []
    for e in entries:
        try:
            head = read_head(e.path, e.info)
        except SpecchatError as exc:
            head = None
            if failed is not None:
                failed.append(str(exc))
        if head is not None:
            heads[e.path] = head
        out.append(LibraryEntry(e.info, e.source, e.repo_id, e.unverified, head))
    for i, e in enumerate(out):
        if e.head is None and heads:
            beside = tuple(p for p in heads_beside(e.path) if p in heads and p != e.path)
            if beside:
                out[i] = LibraryEntry(e.info, e.source, e.repo_id, e.unverified, None, beside)
    return out


def scan(roots: Iterable[ModelRoot] | None = None, *, index: Path | None = None) -> ScanResult:
    """Find GGUF files under ``roots`` (default: :func:`default_roots`), reading only new or changed ones."""
    started = time.perf_counter()
    index = index or index_path()
    old = _load_index(index)
    new: dict[str, dict[str, Any]] = {}
    result = ScanResult(entries=[])
    seen: set[Path] = set()
    for root in roots if roots is not None else default_roots():
        if not root.path.is_dir():
            continue
        for path in _walk(root.path):
            try:
                real = path.resolve()
                st = path.stat()
            except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a symlink loop
                continue  # a dangling symlink or a loop
            if real in seen:
                continue
            seen.add(real)
            key = str(path)
            cached = _cached_record(old.get(key), st, index, key)
            if cached is not None:
                record = cached
                result.cached += 1
            else:
                try:
                    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "info": read_gguf_info(path).to_json()}
                except SpecchatError as exc:
                    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "error": str(exc)}
                result.read += 1
            new[key] = record
            if "error" in record:
                result.failed.append(str(record["error"]))
                continue
            info = GgufInfo.from_json(record["info"])
            repo_id = hfcache.repo_id_of(path) if root.source == "hf-cache" else None
            result.entries.append(LibraryEntry(info, root.source, repo_id, hfcache.is_unverified(path, root.path)))
    if new != old:
        _save_index(index, new)
    result.entries = pair_heads(result.entries, result.failed)
    result.entries.sort(key=lambda e: (e.info.name.lower(), str(e.path)))
    result.seconds = time.perf_counter() - started
    return result
