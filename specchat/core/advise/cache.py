"""Advisor results kept per (target, drafter, machine, llama.cpp build), in a JSON file in the data dir.

A file's identity is its resolved path, size, mtime and a SHA-256 over sampled
blocks (:func:`specchat.core.models.demo.sampled_sha256`, about 1 MB read
whatever the size), so a changed file no longer matches its old results.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import platform
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from specchat.core import paths
from specchat.core.jsonfile import UnreadableFileError, read_json
from specchat.core.models.demo import sampled_sha256

log = logging.getLogger(__name__)

CACHE_FILENAME = "advisor-results.json"
CACHE_VERSION = 1


@functools.lru_cache(maxsize=128)
def _identity(path: str, size: int, mtime_ns: int) -> str:
    return f"{path}|{size}|{mtime_ns}|{sampled_sha256(Path(path))}"


def file_identity(path: str | Path) -> str | None:
    """What a file's results are valid for; None when it cannot be read."""
    try:
        real = Path(path).expanduser().resolve()
        st = real.stat()
        return _identity(str(real), st.st_size, st.st_mtime_ns)
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def machine_identity() -> str:
    """This computer and the llama.cpp build: host, CPU, device names and memory, build features."""
    from specchat.core.llama.devices import build_info

    info = build_info()
    devices = ",".join(f"{d.name}:{d.description}:{d.total_bytes}" for d in info.devices)
    return "|".join(
        [
            platform.node(),
            platform.machine(),
            str(os.cpu_count()),
            platform.processor(),
            devices,
            info.llama_cpp_python,
            info.system_info,
        ]
    )


def result_key(target: str | Path, drafter: str, draft: str | Path | None) -> str | None:
    """The cache key of a pair's result, or None when a file cannot be read."""
    target_id = file_identity(target)
    draft_id = file_identity(draft) if draft else ""
    if target_id is None or draft_id is None:
        return None
    raw = json.dumps([target_id, drafter, draft_id, machine_identity()])
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class CachedResult:
    """What the picker shows for a pair: the predicted (and, for a winner, the measured) speed-up."""

    target: str
    drafter: str  # a DrafterKind value
    draft: str  # "" for MTP heads and n-gram lookup
    best_depth: int
    predicted_speedup: float
    auto_speedup: float
    measured_speedup: float | None
    acceptance: float
    measured_at: float

    def label(self) -> str:
        """``measured here: 1.40x at depth 5`` (or ``predicted here`` for a candidate that was not confirmed)."""
        if self.measured_speedup is not None:
            return f"measured here: {self.measured_speedup:.2f}x at depth {self.best_depth}"
        return f"predicted here: {self.predicted_speedup:.2f}x at depth {self.best_depth}"


def cache_path() -> Path:
    return paths.data_dir() / CACHE_FILENAME


def _load(path: Path, *, rebuilding: bool = False) -> dict[str, Any]:
    """The stored entries by key (each checked only when looked up); {} for a missing or unreadable file.

    ``rebuilding`` (before new results replace the file) says in one line why an unreadable file's go.
    """
    try:
        data = read_json(path)
    except FileNotFoundError:
        return {}
    except UnreadableFileError as exc:
        if rebuilding:
            log.warning("advisor results unreadable: %s; started afresh", exc)
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("results"), dict):
        if rebuilding:
            log.warning("advisor results %s are not version %d results; started afresh", path, CACHE_VERSION)
        return {}
    results: dict[str, Any] = data["results"]
    return results


_TEXTS = ("target", "drafter", "draft")
_NUMBERS = ("predicted_speedup", "auto_speedup", "acceptance", "measured_at")


def _result_of(raw: object) -> CachedResult | None:
    """A stored entry as a result, or None when a field is missing, of the wrong type or not a finite number."""
    if not isinstance(raw, dict) or set(raw) != {f.name for f in fields(CachedResult)}:
        return None

    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    measured = raw["measured_speedup"]
    if (
        not all(isinstance(raw[name], str) for name in _TEXTS)
        or not all(number(raw[name]) for name in _NUMBERS)
        or type(raw["best_depth"]) is not int
        or not (measured is None or number(measured))
    ):
        return None
    return CachedResult(**raw)


def store(results: list[CachedResult], path: Path | None = None) -> None:
    """Add ``results`` to the cache (replacing older ones for the same key); unreadable files are skipped."""
    path = path or cache_path()
    entries = _load(path, rebuilding=True)
    for result in results:
        key = result_key(result.target, result.drafter, result.draft or None)
        if key is not None:
            entries[key] = asdict(result)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "results": entries}, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def lookup(
    target: str | Path, drafter: str, draft: str | Path | None = None, path: Path | None = None
) -> CachedResult | None:
    """The result for this pair on this machine and build, if its files are unchanged since."""
    entries = _load(path or cache_path())
    if not entries:  # nothing measured yet: spare the files' identities
        return None
    key = result_key(target, drafter, draft)
    raw = entries.get(key) if key is not None else None
    if raw is None:
        return None
    result = _result_of(raw)
    if result is None:
        log.warning("advisor results %s: the entry for %s is damaged; skipped", path or cache_path(), Path(target).name)
    return result
