"""Real-model fixtures: the benchmark prompts and deliberately broken model files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="session")
def prompts() -> list[tuple[str, list[dict[str, str]]]]:
    lines = (DATA / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    return [(obj["id"], obj["messages"]) for obj in map(json.loads, filter(None, lines))]


@pytest.fixture(scope="session")
def foreign_draft(demo_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete, loadable copy of the draft whose vocabulary spells one token differently."""
    data = bytearray(demo_pair.draft.read_bytes())
    old, new = "Ġthe".encode(), "Ġteh".encode()
    needle = struct.pack("<Q", len(old)) + old
    at = data.find(needle)
    assert at > 0
    data[at + 8 : at + 8 + len(old)] = new
    path = tmp_path_factory.mktemp("foreign") / "foreign-vocab.gguf"
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="session")
def truncated_gguf(demo_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("broken") / "truncated.gguf"
    path.write_bytes(demo_pair.draft.read_bytes()[:4_000_000])
    return path
