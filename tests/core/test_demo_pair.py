"""The offline demo pair: provisioning, reuse, and rebuilding a damaged cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.core.llama.model import Model
from specchat.core.models.demo import provision_demo_pair
from specchat.core.types import SpecchatError


def test_demo_pair_loads_in_llama_cpp(demo_pair) -> None:
    target = Model(demo_pair.target, vocab_only=True)
    draft = Model(demo_pair.draft, vocab_only=True)
    assert target.n_vocab == draft.n_vocab == 49152
    assert "F32" in Model(demo_pair.target).description
    assert demo_pair.target.stat().st_size > 3 * demo_pair.draft.stat().st_size


def test_second_provision_reuses_the_file(tmp_path: Path) -> None:
    first = provision_demo_pair(tmp_path)
    assert first.converted
    mtime = first.target.stat().st_mtime_ns
    second = provision_demo_pair(tmp_path)
    assert not second.converted
    assert second.target == first.target
    assert second.target.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("damage", ["truncate", "corrupt", "delete_sidecar"])
def test_damaged_cache_is_rebuilt_not_loaded(tmp_path: Path, damage: str) -> None:
    pair = provision_demo_pair(tmp_path)
    size = pair.target.stat().st_size
    if damage == "truncate":
        with pair.target.open("r+b") as f:
            f.truncate(size // 2)
    elif damage == "corrupt":
        with pair.target.open("r+b") as f:
            f.seek(size // 2)
            f.write(b"\xff" * 4096)
    else:
        Path(str(pair.target) + ".json").unlink()
    again = provision_demo_pair(tmp_path)
    assert again.converted
    assert again.target.stat().st_size == size
    Model(again.target, vocab_only=True)


def test_truncated_gguf_is_refused_with_a_message(tmp_path: Path, demo_pair) -> None:
    bad = tmp_path / "half.gguf"
    bad.write_bytes(demo_pair.draft.read_bytes()[:5_000_000])
    with pytest.raises(SpecchatError, match="truncated or corrupt"):
        Model(bad)


def test_missing_and_non_gguf_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecchatError, match="not found"):
        Model(tmp_path / "nope.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(SpecchatError, match="not a GGUF file"):
        Model(text)


def test_cli_models_demo_prints_two_existing_paths(app_dirs) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "specchat", "models", "demo"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    paths = json.loads(out.stdout)
    assert set(paths) == {"target", "draft"}
    assert all(Path(p).is_file() for p in paths.values())
    assert str(app_dirs["data"]) in paths["target"]


def test_import_needs_no_display_and_loads_nothing() -> None:
    code = (
        "import sys, specchat, specchat.__main__, specchat.core.types, specchat.cli.models;"
        "bad=[m for m in ('llama_cpp','PySide6','huggingface_hub') if m in sys.modules];"
        "assert not bad, bad"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "QT_QPA_PLATFORM")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_help_lists_subcommands() -> None:
    out = subprocess.run([sys.executable, "-m", "specchat", "--help"], capture_output=True, text=True, check=True)
    for command in ("chat", "bench", "models"):
        assert command in out.stdout
