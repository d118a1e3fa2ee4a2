"""The local library: finding GGUF files, the metadata index, rescans."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specchat.core.models.ggufmeta import parse_size_label, quant_name, read_gguf_info
from specchat.core.models.hfcache import hf_cache_dir
from specchat.core.models.library import ModelRoot, default_roots, index_path, scan


def test_metadata_of_a_written_file(make_gguf) -> None:
    path = make_gguf("m.gguf", context_length=4096, file_type=15, size_label="1.7B", basename="Tiny", eot=2)
    info = read_gguf_info(path)
    assert (info.architecture, info.basename, info.quant, info.context_length) == ("llama", "Tiny", "Q4_K_M", 4096)
    assert info.parameter_count == 64  # counted from the tensors
    assert info.vocab_size == 32 and (info.bos_id, info.eos_id, info.eot_id, info.add_bos) == (1, 2, 2, False)
    assert info.file_size == path.stat().st_size and info.vocab is None
    vocab = read_gguf_info(path, with_vocab=True).vocab
    assert vocab is not None and vocab.tokens[:2] == ("<|endoftext|>", "<|im_start|>")
    assert parse_size_label("135M") == 135_000_000 and parse_size_label("8x7B") == 56_000_000_000
    assert parse_size_label("big") is None and quant_name(0) == "F32" and quant_name(7) == "Q8_0"


def test_scan_finds_files_everywhere_and_uses_the_index(make_gguf, tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("LLAMA_CACHE", raising=False)
    src = make_gguf("src.gguf")
    # a hub-cache file (symlink into blobs), as downloads leave it
    snap = hf_cache_dir() / "models--acme--Tiny-GGUF" / "snapshots" / ("a" * 40)
    blob = hf_cache_dir() / "models--acme--Tiny-GGUF" / "blobs" / ("b" * 64)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(src.read_bytes())
    snap.mkdir(parents=True)
    (snap / "tiny-Q8_0.gguf").symlink_to(os.path.relpath(blob, snap))
    lms = make_gguf("../home/.lmstudio/models/pub/m/lms.gguf", basename="Lms")
    llc = make_gguf("../home/.cache/llama.cpp/llc.gguf", basename="Llc")
    user = make_gguf("../mine/user.gguf", basename="User")
    (user.parent / "notes.txt").write_text("not a model")
    (user.parent / "broken.gguf").write_text("not gguf either")
    make_gguf("../mine/big-00002-of-00002.gguf")  # later shards are not listed on their own
    (user.parent / "big.gguf.incomplete").write_bytes(b"partial")

    result = scan(default_roots([user.parent]))
    by_source = {(e.source, e.path.name) for e in result.entries}
    assert by_source == {
        ("hf-cache", "tiny-Q8_0.gguf"),
        ("lm-studio", "lms.gguf"),
        ("llama.cpp", "llc.gguf"),
        ("user", "user.gguf"),
    }
    [hub_entry] = [e for e in result.entries if e.source == "hf-cache"]
    assert hub_entry.repo_id == "acme/Tiny-GGUF" and hub_entry.info.file_size == src.stat().st_size
    assert result.read == 5 and result.cached == 0
    assert len(result.failed) == 1 and "broken.gguf" in result.failed[0]
    assert lms.exists() and llc.exists()

    again = scan(default_roots([user.parent]))
    assert again.read == 0 and again.cached == 5
    assert [e.to_json() for e in again.entries] == [e.to_json() for e in result.entries]

    user.unlink()
    after = scan(default_roots([user.parent]))
    assert "user.gguf" not in {e.path.name for e in after.entries} and after.read == 0
    index = json.loads(index_path().read_text())
    assert not any(k.endswith("user.gguf") for k in index["files"])


def test_a_changed_file_is_read_again(make_gguf) -> None:
    path = make_gguf("lib/a.gguf", context_length=1024)
    roots = [ModelRoot(path.parent, "user")]
    assert scan(roots).entries[0].info.context_length == 1024
    make_gguf("lib/a.gguf", context_length=8192, tensor_elements=128)
    result = scan(roots)
    assert result.read == 1 and result.entries[0].info.context_length == 8192


def test_rescan_of_many_files_is_answered_from_the_index(make_gguf) -> None:
    for i in range(40):
        make_gguf(f"many/m{i:02d}.gguf", basename=f"M{i}")
    roots = [ModelRoot(make_gguf.root / "many", "user")]
    first = scan(roots)
    assert first.read == 40
    second = scan(roots)
    assert (second.read, second.cached, len(second.entries)) == (0, 40, 40)
