"""GGUF metadata (identity, size, tokenizer) read with the ``gguf`` package, without loading weights."""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specchat.core.collector import collector_paused
from specchat.core.models.errors import GgufReadError
from specchat.core.models.splits import split_parts
from specchat.core.paths import not_a_file

_SIZE_RE = re.compile(r"^(?:(\d+)x)?(\d+(?:\.\d+)?)([KMBT])", re.IGNORECASE)
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
# The gguf reader's own ValueErrors that say something useful; any other reads as "truncated or corrupt".
_KNOWN_READER_ERRORS = re.compile(r"magic|version|alignment|duplicated", re.IGNORECASE)


@dataclass(frozen=True)
class Vocab:
    """Token texts and token types (gguf.TokenType values), by id."""

    tokens: tuple[str, ...]
    types: tuple[int, ...]


@dataclass(frozen=True)
class GgufInfo:
    """What specchat needs to know about a GGUF file."""

    path: Path
    file_size: int  # bytes, all parts of a split model together
    mtime_ns: int
    name: str
    architecture: str
    basename: str | None
    size_label: str | None
    parameter_count: int | None
    quant: str | None  # "Q4_K_M", "F32" ...
    context_length: int | None
    tokenizer_model: str | None  # tokenizer.ggml.model: "gpt2" (BPE), "llama" (SentencePiece) ...
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    add_bos: bool | None
    vocab_fingerprint: str | None  # sha256 over the tokenizer model and every token text
    n_split: int = 1
    mtp_layers: int = 0  # {arch}.nextn_predict_layers: the model's own multi-token-prediction heads
    vocab: Vocab | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("vocab")
        data["path"] = str(self.path)
        return data

    @classmethod
    def from_json(cls, data: object) -> GgufInfo:
        """What :meth:`to_json` gave; ValueError naming the first field that is missing or of the wrong type."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        for name, kinds in _JSON_FIELDS.items():
            if name not in data:
                raise ValueError(f"{name} is missing")
            value = data[name]
            if type(value) not in kinds and not (value is None and None in kinds):
                raise ValueError(f"{name} is {value!r:.40}")
        extra = set(data) - set(_JSON_FIELDS)
        if extra:
            raise ValueError(f"unknown field {sorted(extra)[0]!r:.40}")
        return cls(**{**data, "path": Path(data["path"])})


_TEXT, _COUNT, _MAYBE_TEXT, _MAYBE_COUNT = (str,), (int,), (str, None), (int, None)
_JSON_FIELDS: dict[str, tuple[type | None, ...]] = {
    "path": _TEXT,
    "file_size": _COUNT,
    "mtime_ns": _COUNT,
    "name": _TEXT,
    "architecture": _TEXT,
    "basename": _MAYBE_TEXT,
    "size_label": _MAYBE_TEXT,
    "parameter_count": _MAYBE_COUNT,
    "quant": _MAYBE_TEXT,
    "context_length": _MAYBE_COUNT,
    "tokenizer_model": _MAYBE_TEXT,
    "vocab_size": _COUNT,
    "bos_id": _MAYBE_COUNT,
    "eos_id": _MAYBE_COUNT,
    "eot_id": _MAYBE_COUNT,
    "add_bos": (bool, None),
    "vocab_fingerprint": _MAYBE_TEXT,
    "n_split": _COUNT,
    "mtp_layers": _COUNT,
}
"""The type of each field in :meth:`GgufInfo.to_json`'s form (``type(x) is int``: a bool is no count)."""


def vocab_fingerprint(tokenizer_model: str | None, tokens: Sequence[str]) -> str:
    """A SHA-256 that is equal for two files exactly when their tokenizer type and token texts are."""
    h = hashlib.sha256((tokenizer_model or "").encode() + b"\0")
    for text in tokens:
        raw = text.encode("utf-8", "surrogateescape")
        h.update(len(raw).to_bytes(4, "little"))
        h.update(raw)
    return h.hexdigest()


def parse_size_label(label: str | None) -> int | None:
    """``"135M"`` -> 135_000_000, ``"8x7B"`` -> 56_000_000_000; None when it is not a size."""
    m = _SIZE_RE.match(label or "")
    if not m:
        return None
    experts = int(m.group(1) or 1)
    return int(experts * float(m.group(2)) * _SCALE[m.group(3).upper()])


def quant_name(file_type: int | None) -> str | None:
    """``general.file_type`` as a quant name (``15`` -> ``Q4_K_M``)."""
    if file_type is None:
        return None
    import gguf

    try:
        name = gguf.LlamaFileType(file_type & ~gguf.LlamaFileType.GUESSED).name
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _value(fields: dict[str, Any], key: str) -> Any:
    field_ = fields.get(key)
    return None if field_ is None else field_.contents()


def _strings(fields: dict[str, Any], key: str) -> list[str]:
    """A string array, decoded leniently (a few vocabularies hold invalid UTF-8 byte tokens)."""
    field_ = fields.get(key)
    if field_ is None:
        return []
    return [field_.parts[i].tobytes().decode("utf-8", "surrogateescape") for i in field_.data]


def read_gguf_info(path: Path, *, with_vocab: bool = False) -> GgufInfo:
    """Read a GGUF file's header (memory-mapped; tensors are not loaded).

    ``with_vocab`` keeps the token texts and types on the result (for compatibility checks).
    """
    with collector_paused():
        return _read_gguf_info(path, with_vocab)


def _read_gguf_info(path: Path, with_vocab: bool) -> GgufInfo:
    import gguf
    import numpy as np

    from specchat.core.models.shape import check_header  # imports gguf: only when a file is read

    path = Path(path)
    kind = not_a_file(path)
    if kind is not None and kind != "not found":  # a FIFO would block the open below
        raise GgufReadError(f"cannot read {path}: it is {kind}, not a file")
    try:
        stat = path.stat()
        check_header(path)
        # errstate: the reader adds offsets in numpy integers; an absurd one must raise, not print a warning.
        with np.errstate(all="raise"):
            reader = gguf.GGUFReader(path)
        _check_tensors(reader, path, stat.st_size)
    except FileNotFoundError:
        raise GgufReadError(f"GGUF file not found: {path}") from None
    except OSError as exc:
        raise GgufReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    except GgufReadError:
        raise
    except ValueError as exc:
        known = str(exc) if _KNOWN_READER_ERRORS.search(str(exc)) else "its header is truncated or corrupt"
        raise GgufReadError(f"{path} is not a readable GGUF file: {known}") from None
    except (EOFError, KeyError, IndexError, TypeError, ArithmeticError, MemoryError, RuntimeWarning, struct.error):
        raise GgufReadError(f"{path} is not a readable GGUF file: its header is truncated or corrupt") from None
    try:
        fields = reader.fields
        arch = str(_value(fields, "general.architecture") or "unknown")
        tokenizer_model = _value(fields, "tokenizer.ggml.model")
        tokens = _strings(fields, "tokenizer.ggml.tokens")
        types = _value(fields, "tokenizer.ggml.token_type") or []
        n_split = int(_value(fields, "split.count") or 1)
        size_label = _value(fields, "general.size_label")
        params = parse_size_label(size_label)
        if n_split == 1 and reader.tensors:
            params = sum(int(t.n_elements) for t in reader.tensors)
        parts = split_parts(path) if n_split > 1 else [path]
        file_size = sum(p.stat().st_size for p in parts if p.exists())
        add_bos = _value(fields, "tokenizer.ggml.add_bos_token")
        info = GgufInfo(
            path=path,
            file_size=file_size,
            mtime_ns=stat.st_mtime_ns,
            name=str(_value(fields, "general.name") or path.stem),
            architecture=arch,
            basename=_value(fields, "general.basename"),
            size_label=size_label,
            parameter_count=params,
            quant=quant_name(_value(fields, "general.file_type")),
            context_length=_value(fields, f"{arch}.context_length"),
            tokenizer_model=tokenizer_model,
            vocab_size=len(tokens),
            bos_id=_value(fields, "tokenizer.ggml.bos_token_id"),
            eos_id=_value(fields, "tokenizer.ggml.eos_token_id"),
            eot_id=_value(fields, "tokenizer.ggml.eot_token_id"),
            add_bos=None if add_bos is None else bool(add_bos),
            vocab_fingerprint=vocab_fingerprint(tokenizer_model, tokens) if tokens else None,
            n_split=n_split,
            mtp_layers=int(_value(fields, f"{arch}.nextn_predict_layers") or 0),
            vocab=Vocab(tuple(tokens), tuple(int(t) for t in types)) if with_vocab else None,
        )
    except (ValueError, KeyError, IndexError, TypeError, ArithmeticError, UnicodeError, RuntimeWarning) as exc:
        raise GgufReadError(f"{path} has malformed GGUF metadata ({type(exc).__name__})") from None
    return info


def _check_tensors(reader: Any, path: Path, file_size: int) -> None:
    """Refuse what llama.cpp refuses to load: a tensor misaligned, or not wholly inside the file.

    Sizes are recomputed in Python integers: the reader's numpy arithmetic wraps around silently.
    """
    import gguf

    alignment = int(getattr(reader, "alignment", 32) or 32)
    start = int(reader.data_offset)
    for tensor in reader.tensors:
        dims = [int(d) for d in tensor.field.parts[3]]
        offset = int(tensor.field.parts[5][0])
        block_size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(tensor.tensor_type))]
        n_elements = math.prod(dims)
        if n_elements % block_size:
            raise GgufReadError(
                f"{path}: tensor {tensor.name!r} has a shape its type cannot hold; llama.cpp would refuse it"
            )
        n_bytes = n_elements // block_size * type_size
        if offset % alignment:
            raise GgufReadError(f"{path}: tensor {tensor.name!r} is misaligned; llama.cpp would refuse it")
        if start + offset + n_bytes > file_size:
            raise GgufReadError(
                f"{path}: tensor {tensor.name!r} lies beyond the end of the file (truncated or corrupt); "
                "llama.cpp would refuse it"
            )
