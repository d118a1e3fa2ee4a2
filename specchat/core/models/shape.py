"""A model's layer and attention shape, read from the head of its GGUF file.

GPU placement must be decided before llama.cpp loads the weights, so it needs
the layer count and the KV-cache width without loading anything. llama.cpp's
``vocab_only`` load does not fill these in, and ``gguf.GGUFReader`` parses
every field up front (about 2 s for a 49k-token vocabulary) while we need a
handful of scalars that sit before the tokenizer arrays. So this module walks
the key/value section itself, using the ``gguf`` package's type codes and key
names, and stops as soon as it reaches the tokenizer with what it needs.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import gguf

from specchat.core.models.errors import GgufReadError
from specchat.core.models.splits import split_parts

_SCALARS: dict[gguf.GGUFValueType, str] = {
    gguf.GGUFValueType.UINT8: "<B",
    gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H",
    gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I",
    gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.FLOAT32: "<f",
    gguf.GGUFValueType.BOOL: "<?",
    gguf.GGUFValueType.UINT64: "<Q",
    gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT64: "<d",
}
_MAX_COUNT = 1 << 28
_MAX_NESTING = 8  # the format allows arrays of arrays; a corrupt file must not exhaust the stack


@dataclass(frozen=True)
class ModelShape:
    """What memory planning needs to know about a model file."""

    file_size: int  # bytes, every part of a split model together
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    context_length: int = 0  # the context it was trained for; 0 when the file does not say

    def usable_context(self, n_ctx: int) -> int:
        """``n_ctx`` capped at this (target) model's trained context, as the engine caps both contexts."""
        return min(n_ctx, self.context_length) if self.context_length > 0 else n_ctx

    def kv_cache_bytes(self, n_ctx: int, *, bytes_per_value: int = 2) -> int:
        """K and V cache for ``n_ctx`` positions over every layer (llama.cpp's default cache is F16)."""
        per_token_layer = self.n_head_kv * (self.head_dim_k + self.head_dim_v) * bytes_per_value
        return n_ctx * self.n_layers * per_token_layer

    def memory_bytes(self, n_ctx: int) -> int:
        """Weights plus KV cache: what the model claims on a device that holds all of it."""
        return self.file_size + self.kv_cache_bytes(n_ctx)


class _Reader:
    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.size = os.fstat(f.fileno()).st_size

    def take(self, n: int) -> bytes:
        if n > self.size - self.f.tell():  # a corrupt length: do not read (or allocate) past the end
            raise EOFError("file ends inside the header")
        data = self.f.read(n)
        if len(data) != n:
            raise EOFError("file ends inside the header")
        return data

    def skip(self, n: int) -> None:
        if n > self.size - self.f.tell():
            raise EOFError("file ends inside the header")
        self.f.seek(n, os.SEEK_CUR)

    def unpack(self, fmt: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.count())

    def count(self) -> int:
        n = int(self.unpack("<Q"))
        if n > _MAX_COUNT:  # a corrupt length; do not try to allocate it
            raise ValueError(f"implausible length {n}")
        return n

    def value(self, vtype: gguf.GGUFValueType, depth: int = 0) -> object:
        """Read one value; arrays come back as lists (string arrays and nested ones are skipped as ``None``)."""
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype is gguf.GGUFValueType.STRING:
            return self.string()
        if vtype is gguf.GGUFValueType.ARRAY:
            if depth >= _MAX_NESTING:
                raise ValueError(f"arrays nested more than {_MAX_NESTING} deep")
            item = gguf.GGUFValueType(int(self.unpack("<I")))
            count = self.count()
            if item in _SCALARS:
                fmt = _SCALARS[item]
                size = struct.calcsize(fmt)
                raw = self.take(size * count)
                return list(struct.unpack(f"<{count}{fmt[1]}", raw)) if count <= 4096 else None
            for _ in range(count):
                self.value(item, depth + 1)
            return None
        raise ValueError(f"unknown value type {vtype}")

    def skip_value(self, vtype: gguf.GGUFValueType, depth: int = 0) -> None:
        """Step over one value, checking every length against what is left of the file."""
        if vtype in _SCALARS:
            self.skip(struct.calcsize(_SCALARS[vtype]))
        elif vtype is gguf.GGUFValueType.STRING:
            self.skip(self.count())
        elif vtype is gguf.GGUFValueType.ARRAY:
            if depth >= _MAX_NESTING:
                raise ValueError(f"arrays nested more than {_MAX_NESTING} deep")
            item = gguf.GGUFValueType(int(self.unpack("<I")))
            count = self.count()
            if item in _SCALARS:
                self.skip(struct.calcsize(_SCALARS[item]) * count)
                return
            if count * _MIN_VALUE_SIZE[item] > self.size - self.f.tell():
                raise EOFError("file ends inside the header")
            if item is gguf.GGUFValueType.STRING:
                self._skip_strings(count)
                return
            for _ in range(count):
                self.skip_value(item, depth + 1)
        else:
            raise ValueError(f"unknown value type {vtype}")

    def _skip_strings(self, count: int) -> None:
        """Step over ``count`` strings, walking their lengths in 1 MiB buffers (a vocabulary has 100k+)."""
        pos = self.f.tell()
        base, buf = pos, b""
        for _ in range(count):
            if pos + 8 > base + len(buf):
                self.f.seek(pos)
                base, buf = pos, self.f.read(min(1 << 20, self.size - pos))
                if len(buf) < 8:
                    raise EOFError("file ends inside the header")
            pos += 8 + struct.unpack_from("<Q", buf, pos - base)[0]
            if pos > self.size:
                raise EOFError("file ends inside the header")
        self.f.seek(pos)


_MIN_VALUE_SIZE = {gguf.GGUFValueType.STRING: 8, gguf.GGUFValueType.ARRAY: 12}
_MAX_DIMS = 4  # GGML_MAX_DIMS


def check_header(path: str | Path) -> None:
    """Walk a whole GGUF header, every key/value and tensor record, trusting no count or length in it.

    Raises OSError, EOFError, ValueError or struct.error. ``gguf.GGUFReader`` can
    spin for hours on an array count of 2**40 that points past the end of the
    file, so it is only given files that pass this walk.
    """
    with Path(path).open("rb") as f:
        r = _Reader(f)
        if r.take(4) != b"GGUF":
            raise ValueError("bad magic")
        version = int(r.unpack("<I"))
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        n_tensors = int(r.unpack("<Q"))
        n_kv = int(r.unpack("<Q"))
        if 12 * n_kv + 24 * n_tensors > r.size - r.f.tell():  # the smallest records there are
            raise EOFError("file ends inside the header")
        for _ in range(n_kv):
            r.skip(r.count())
            r.skip_value(gguf.GGUFValueType(int(r.unpack("<I"))))
        for _ in range(n_tensors):
            r.skip(r.count())
            n_dims = int(r.unpack("<I"))
            if n_dims > _MAX_DIMS:
                raise ValueError(f"a tensor with {n_dims} dimensions")
            r.skip(8 * n_dims)
            gguf.GGMLQuantizationType(int(r.unpack("<I")))
            r.skip(8)


def _int(value: object) -> int | None:
    """A count from a scalar, or the largest entry of a per-layer array."""
    if isinstance(value, list):
        return int(max(value)) if value else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    return None


def read_model_shape(path: str | Path) -> ModelShape:
    """Read layer count and attention shape from a GGUF header; raise GgufReadError if unreadable."""
    path = Path(path).expanduser()
    try:
        with path.open("rb") as f:
            fields = _read_fields(_Reader(f))
    except FileNotFoundError:
        raise GgufReadError(f"GGUF file not found: {path}") from None
    except OSError as exc:
        raise GgufReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (EOFError, ValueError, MemoryError, struct.error) as exc:
        raise GgufReadError(f"{path} is not a readable GGUF file ({str(exc) or type(exc).__name__})") from None
    try:
        return _shape(path, fields)
    except (ValueError, OverflowError) as exc:  # e.g. a NaN or infinite float where a count belongs
        raise GgufReadError(f"{path} has an unusable model shape ({exc})") from None


def _shape(path: Path, fields: dict[str, object]) -> ModelShape:
    arch = fields.get(gguf.Keys.General.ARCHITECTURE)
    arch = arch.decode("utf-8", "replace") if isinstance(arch, bytes) else None
    if not arch:
        raise GgufReadError(f"{path} does not name its architecture")

    def get(key_template: str) -> int | None:
        return _int(fields.get(key_template.format(arch=arch)))

    n_layers = get(gguf.Keys.LLM.BLOCK_COUNT)
    n_embd = get(gguf.Keys.LLM.EMBEDDING_LENGTH)
    if not n_layers or not n_embd:
        raise GgufReadError(f"{path} lacks {arch}.block_count or {arch}.embedding_length")
    n_head = get(gguf.Keys.Attention.HEAD_COUNT) or 1
    n_head_kv = get(gguf.Keys.Attention.HEAD_COUNT_KV) or n_head
    head_dim_k = get(gguf.Keys.Attention.KEY_LENGTH) or n_embd // n_head
    head_dim_v = get(gguf.Keys.Attention.VALUE_LENGTH) or n_embd // n_head
    context_length = get(gguf.Keys.LLM.CONTEXT_LENGTH) or 0
    numbers = (n_layers, n_embd, n_head, n_head_kv, head_dim_k, head_dim_v)
    if min(numbers) < 1 or context_length < 0:
        raise GgufReadError(f"{path} has an impossible {arch} shape {numbers}")
    size = sum(p.stat().st_size for p in split_parts(path) if p.exists())
    return ModelShape(size, *numbers, context_length=context_length)


def _read_fields(r: _Reader) -> dict[str, object]:
    if r.take(4) != b"GGUF":
        raise ValueError("bad magic")
    version = int(r.unpack("<I"))
    if version not in (2, 3):  # 1 had 32-bit counts; a byte-swapped (big-endian) file reads as a huge number
        raise ValueError(f"unsupported GGUF version {version}")
    r.unpack("<Q")  # tensor count
    n_kv = int(r.unpack("<Q"))
    fields: dict[str, object] = {}
    for _ in range(n_kv):
        key = r.string().decode("utf-8", "replace")
        # The tokenizer's arrays are the bulk of a header. Converters write the architecture's
        # keys first; one that came after the tokenizer would be missed and fall back to a default.
        if key.startswith("tokenizer.") and _has_shape(fields):
            break
        fields[key] = r.value(gguf.GGUFValueType(int(r.unpack("<I"))))
    return fields


def _has_shape(fields: dict[str, object]) -> bool:
    arch = fields.get(gguf.Keys.General.ARCHITECTURE)
    if not isinstance(arch, bytes):
        return False
    a = arch.decode("utf-8", "replace")
    return all(
        k.format(arch=a) in fields
        for k in (gguf.Keys.LLM.BLOCK_COUNT, gguf.Keys.LLM.EMBEDDING_LENGTH, gguf.Keys.Attention.HEAD_COUNT)
    )
