"""Small real models for the advisor's tests: the random-weight llama files and a copy with one token respelled."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A folder beside the target holding a compatible draft, one with a foreign token and one bigger file."""
    folder = tmp_path / "library"
    folder.mkdir()
    shutil.copy(MODELS / "llama.gguf", folder / "target.gguf")
    shutil.copy(MODELS / "llama-q8.gguf", folder / "good-draft.gguf")
    data = bytearray((MODELS / "llama-q8.gguf").read_bytes())
    needle = struct.pack("<Q", 6) + b"tok_42"
    at = data.find(needle)
    assert at > 0
    data[at + 8 : at + 14] = b"tak_42"
    (folder / "foreign-draft.gguf").write_bytes(bytes(data))
    shutil.copy(MODELS / "qwen35-mtp.gguf", folder / "bigger.gguf")  # larger than the target: no draft for it
    return folder
