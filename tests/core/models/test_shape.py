"""Reading a model's layer and attention shape from the head of a GGUF file."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from specchat.core.models.errors import GgufReadError
from specchat.core.models.shape import ModelShape, read_model_shape
from support.gguf_files import GgufMaker

MIB = 1 << 20
SHAPE = {
    "{arch}.block_count": 30,
    "{arch}.embedding_length": 576,
    "{arch}.attention.head_count": 9,
    "{arch}.attention.head_count_kv": 3,
}


def test_demo_files_match_the_gguf_library(demo_pair) -> None:
    import gguf

    for path in (demo_pair.target, demo_pair.draft):
        shape = read_model_shape(path)
        fields = gguf.GGUFReader(path).fields
        assert shape.n_layers == fields["llama.block_count"].contents()
        assert shape.n_embd == fields["llama.embedding_length"].contents()
        assert shape.n_head == fields["llama.attention.head_count"].contents()
        assert shape.n_head_kv == fields["llama.attention.head_count_kv"].contents()
        assert shape.head_dim_k == shape.head_dim_v == shape.n_embd // shape.n_head
        assert shape.file_size == path.stat().st_size
        assert shape.context_length == fields["llama.context_length"].contents() == 8192
        # llama.cpp reports "KV self size = 90.00 MiB" for SmolLM2-135M at 4096 positions.
        assert shape.kv_cache_bytes(4096) == 90 * MIB
        assert shape.memory_bytes(4096) == shape.file_size + 90 * MIB


def test_shape_keys_before_the_tokenizer(make_gguf: GgufMaker) -> None:
    path = make_gguf("a.gguf", model_kv=SHAPE)
    assert read_model_shape(path) == ModelShape(path.stat().st_size, 30, 576, 9, 3, 64, 64, context_length=2048)


def test_shape_keys_after_the_tokenizer_are_still_found(make_gguf: GgufMaker) -> None:
    path = make_gguf("late.gguf", trailing_kv=SHAPE)
    assert read_model_shape(path).n_head_kv == 3


def test_defaults_and_per_layer_arrays(make_gguf: GgufMaker) -> None:
    # No head_count_kv: every head has its own KV (multi-head attention).
    mha = make_gguf("mha.gguf", model_kv={k: v for k, v in SHAPE.items() if "head_count_kv" not in k})
    assert read_model_shape(mha).n_head_kv == 9
    # Per-layer KV heads (OpenELM-style) count at their widest; explicit head widths win.
    varied = make_gguf(
        "varied.gguf",
        model_kv={
            **SHAPE,
            "{arch}.attention.head_count_kv": [1, 2, 4],
            "{arch}.attention.key_length": 128,
            "{arch}.attention.value_length": 96,
        },
    )
    shape = read_model_shape(varied)
    assert (shape.n_head_kv, shape.head_dim_k, shape.head_dim_v) == (4, 128, 96)
    assert shape.kv_cache_bytes(10) == 10 * 30 * 4 * (128 + 96) * 2


def test_split_model_counts_every_part(make_gguf: GgufMaker) -> None:
    first = make_gguf("big-00001-of-00002.gguf", model_kv=SHAPE)
    second = make_gguf("big-00002-of-00002.gguf", model_kv=SHAPE)
    assert read_model_shape(first).file_size == first.stat().st_size + second.stat().st_size


def test_home_relative_paths(make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_gguf("home.gguf", model_kv=SHAPE)
    monkeypatch.setenv("HOME", str(path.parent))
    assert read_model_shape("~/home.gguf").n_layers == 30


def test_impossible_shapes_are_refused(make_gguf: GgufMaker) -> None:
    path = make_gguf("negative.gguf", model_kv={**SHAPE, "{arch}.attention.key_length": -64})
    with pytest.raises(GgufReadError, match="impossible llama shape"):
        read_model_shape(path)


def test_missing_shape_is_a_one_line_error(make_gguf: GgufMaker) -> None:
    path = make_gguf("noshape.gguf")
    with pytest.raises(GgufReadError, match="lacks llama.block_count") as info:
        read_model_shape(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "damage", ["missing", "not_gguf", "truncated", "huge_length", "old_version", "big_endian", "nested_arrays"]
)
def test_unreadable_files(make_gguf: GgufMaker, tmp_path: Path, damage: str) -> None:
    path = make_gguf("m.gguf", model_kv=SHAPE)
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "not_gguf":
        path.write_bytes(b"PK\x03\x04" + data[4:])
    elif damage == "truncated":
        path.write_bytes(data[:60])
    elif damage == "huge_length":
        # The first key's length field, right after magic, version, tensor and KV counts.
        path.write_bytes(data[:24] + struct.pack("<Q", 1 << 62) + data[32:])
    elif damage == "old_version":
        path.write_bytes(data[:4] + struct.pack("<I", 1) + data[8:])
    elif damage == "big_endian":
        path.write_bytes(data[:4] + struct.pack(">I", 3) + data[8:])
    else:
        # A header whose first value is an array of arrays of arrays... (deep enough to exhaust recursion).
        key = b"general.architecture"
        nested = struct.pack("<IQ", 9, 1) * 5000
        head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<I", 9)
        path.write_bytes(head + nested)
    with pytest.raises(GgufReadError) as info:
        read_model_shape(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message


def test_nested_arrays_are_skipped(make_gguf: GgufMaker) -> None:
    path = make_gguf("nested.gguf", model_kv={"{arch}.some_table": [[1, 2], [3]], **SHAPE})
    assert read_model_shape(path).n_layers == 30


def test_non_numeric_shape_is_a_one_line_error(make_gguf: GgufMaker, tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "nan.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(30)
    w.add_float32("llama.embedding_length", float("nan"))
    w.add_head_count(9)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(GgufReadError, match="unusable model shape") as info:
        read_model_shape(path)
    assert "\n" not in str(info.value)
