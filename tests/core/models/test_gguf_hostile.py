"""GGUF files llama.cpp would refuse are refused by the metadata readers too, in one line, without numpy
warnings; a bounded fuzz of truncations and bit flips finds no other way out."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat.core.models.compat import check_pair
from specchat.core.models.errors import GgufReadError
from specchat.core.models.ggufmeta import read_gguf_info
from specchat.core.models.shape import read_model_shape
from support.gguf_files import write_gguf

SHAPE = {"{arch}.block_count": 2, "{arch}.embedding_length": 64, "{arch}.attention.head_count": 4}
TENSOR = b"token_embd.weight"


def _offset_position(data: bytes) -> int:
    """Where the first tensor's data offset (u64) sits in the header."""
    at = data.find(struct.pack("<Q", len(TENSOR)) + TENSOR)
    assert at > 0
    at += 8 + len(TENSOR)
    (n_dims,) = struct.unpack_from("<I", data, at)
    return at + 4 + 8 * int(n_dims) + 4


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_gguf(tmp_path_factory.mktemp("fuzz") / "small.gguf", model_kv=SHAPE).read_bytes()


def _with_offset(tmp_path: Path, data: bytes, offset: int, name: str, *, tail: int = 0) -> Path:
    bad = bytearray(data)
    struct.pack_into("<Q", bad, _offset_position(data), offset)
    path = tmp_path / name
    path.write_bytes(bytes(bad) + b"\0" * tail)
    return path


@pytest.mark.parametrize(
    ("offset", "tail", "expected"),
    [
        (0xFFFF_FFFF_FFFF_FFE0, 0, "truncated or corrupt"),  # wraps around to a place inside the header
        (1 << 40, 0, "truncated or corrupt"),
        (32, 0, "truncated or corrupt"),  # aligned, but the tensor runs past the end
        (8, 256, "misaligned"),  # inside the file, but not on the file's alignment
    ],
)
def test_a_tensor_llama_cpp_would_refuse_is_refused(
    tmp_path: Path, small_gguf: bytes, offset: int, tail: int, expected: str
) -> None:
    path = _with_offset(tmp_path, small_gguf, offset, "bad.gguf", tail=tail)
    with pytest.raises(GgufReadError) as info:
        read_gguf_info(path)
    message = str(info.value)
    assert expected in message and "\n" not in message
    assert "index" not in message and "out of bounds" not in message and "reshape" not in message


def test_tensor_dimensions_that_overflow_are_refused(tmp_path: Path, small_gguf: bytes) -> None:
    bad = bytearray(small_gguf)
    dims_at = _offset_position(small_gguf) - 4 - 16  # two u64 dims, then the type, then the offset
    struct.pack_into("<QQ", bad, dims_at, 1 << 32, 1 << 32)  # numpy's product wraps to 0
    path = tmp_path / "huge.gguf"
    path.write_bytes(bytes(bad))
    with pytest.raises(GgufReadError, match="truncated or corrupt|beyond the end"):
        read_gguf_info(path)


@pytest.mark.parametrize("key", [b"tokenizer.ggml.tokens", b"tokenizer.ggml.token_type"])
def test_an_array_count_past_the_end_fails_at_once(tmp_path: Path, small_gguf: bytes, key: bytes) -> None:
    # gguf.GGUFReader alone steps through such an array item by item, for hours
    at = small_gguf.find(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 4 + 4
    bad = bytearray(small_gguf)
    struct.pack_into("<Q", bad, at, 1 << 40)
    path = tmp_path / "long-array.gguf"
    path.write_bytes(bytes(bad))
    start = time.monotonic()
    with pytest.raises(GgufReadError, match="truncated or corrupt"):
        read_gguf_info(path)
    assert read_model_shape(path).n_layers == 2  # the shape sits before the tokenizer: still readable
    assert time.monotonic() - start < 2.0


def test_the_untouched_file_reads(tmp_path: Path, small_gguf: bytes) -> None:
    path = tmp_path / "ok.gguf"
    path.write_bytes(small_gguf)
    assert read_gguf_info(path).name == "TestLM 135M"
    assert read_model_shape(path).n_layers == 2


def test_models_check_says_it_could_not_verify_an_absurd_offset(tmp_path: Path, small_gguf: bytes) -> None:
    good = tmp_path / "good.gguf"
    good.write_bytes(small_gguf)
    bad = _with_offset(tmp_path, small_gguf, 0xFFFF_FFFF_FFFF_FFE0, "bad.gguf")
    out = subprocess.run(
        [sys.executable, "-m", "specchat", "models", "check", str(good), str(bad)],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=120,
    )
    assert out.returncode == 2, out
    assert out.stdout == "" and "compatible" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: could not verify the pair: "), out.stderr
    assert "Warning" not in out.stderr and "out of bounds" not in out.stderr


# -- fuzz: truncations, bit flips and overwritten words of a small GGUF ---------------------------


def _mutate(data: bytes, cut: int | None, flips: list[tuple[int, int]], words: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for position, bit in flips:
        out[position % len(out)] ^= 1 << bit
    for position, value in words:  # a count, length or offset replaced by an arbitrary number
        at = position % (len(out) - 8)
        struct.pack_into("<Q", out, at, value)
    return bytes(out[:cut] if cut is not None else out)


def _only_one_line_errors(path: Path, other: Path) -> None:
    for read in (
        lambda: read_gguf_info(path, with_vocab=True),
        lambda: read_model_shape(path),
        lambda: check_pair(other, path),
    ):
        try:
            read()
        except GgufReadError as exc:
            assert str(exc) and "\n" not in str(exc)
            assert "out of bounds" not in str(exc)


mutations = st.tuples(
    st.one_of(st.none(), st.integers(min_value=0, max_value=1500)),
    st.lists(st.tuples(st.integers(min_value=0, max_value=1 << 16), st.integers(min_value=0, max_value=7)), max_size=4),
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=1 << 16),
            st.sampled_from([0, 1, 7, 31, 1 << 16, 1 << 31, (1 << 63) - 1, (1 << 64) - 1]),
        ),
        max_size=2,
    ),
)


@settings(
    max_examples=250, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(mutation=mutations)
def test_fuzzed_small_gguf_gives_a_result_or_one_line(small_gguf: bytes, mutation) -> None:
    cut, flips, words = mutation
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        original = folder / "original.gguf"
        original.write_bytes(small_gguf)
        path = folder / "mutated.gguf"
        path.write_bytes(_mutate(small_gguf, cut, flips, words))
        _only_one_line_errors(path, original)


@pytest.fixture(scope="module")
def draft_head() -> bytes:
    from specchat.core.models.demo import demo_draft_path

    with demo_draft_path().open("rb") as f:
        return f.read(4096)  # every key the shape reader needs, and the start of the vocabulary


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    cut=st.one_of(st.none(), st.integers(min_value=0, max_value=4096)),
    flips=st.lists(
        st.tuples(st.integers(min_value=0, max_value=4095), st.integers(min_value=0, max_value=7)),
        min_size=1,
        max_size=3,
    ),
)
def test_fuzzed_demo_draft_head_gives_a_shape_or_one_line(
    draft_head: bytes, cut: int | None, flips: list[tuple[int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "head.gguf"
        path.write_bytes(_mutate(draft_head, cut, flips, []))
        try:
            shape = read_model_shape(path)
        except GgufReadError as exc:
            assert str(exc) and "\n" not in str(exc)
        else:
            assert shape.n_layers >= 1 and shape.n_embd >= 1
