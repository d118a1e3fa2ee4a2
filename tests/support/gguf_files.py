"""Tiny but valid GGUF files with a chosen tokenizer and identity, written on demand."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import gguf

BASE_VOCAB = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"tok{i}" for i in range(29)]


def write_gguf(
    path: Path,
    *,
    tokens: Sequence[str] = BASE_VOCAB,
    token_types: Sequence[int] | None = None,
    tokenizer_model: str = "gpt2",
    arch: str = "llama",
    bos: int | None = 1,
    eos: int | None = 2,
    eot: int | None = None,
    add_bos: bool | None = False,
    context_length: int = 2048,
    basename: str | None = "TestLM",
    size_label: str | None = "135M",
    file_type: int = 7,
    tensor_elements: int = 64,
    model_kv: Mapping[str, int | bool | str | list[int]] | None = None,
    trailing_kv: dict[str, int | bool | str | list[int]] | None = None,
    general_name: str | None = None,
    tensors: Sequence[str] = (),
) -> Path:
    """Write a small but valid GGUF with the given tokenizer and identity; returns ``path``.

    ``model_kv`` holds shape keys such as ``{arch}.block_count`` (written before
    the tokenizer, as converters do); ``trailing_kv`` the same, written after it.
    Integers are written as uint32 (negative ones as int32), booleans as bool, strings as
    strings, lists as arrays. ``general_name`` replaces ``general.name``; ``tensors`` adds tiny F32 tensors of
    those names (a head's marker tensors, such as DSpark's ``markov_w1.weight``).
    """
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(general_name if general_name is not None else f"{basename or 'model'} {size_label or ''}".strip())
    if basename:
        w.add_basename(basename)
    if size_label:
        w.add_size_label(size_label)
    w.add_file_type(file_type)
    w.add_context_length(context_length)
    _add_kv(w, arch, model_kv)
    w.add_tokenizer_model(tokenizer_model)
    w.add_token_list(list(tokens))
    w.add_token_types(list(token_types) if token_types is not None else [1] * len(tokens))
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if eot is not None:
        w.add_eot_token_id(eot)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    _add_kv(w, arch, trailing_kv)
    w.add_tensor("token_embd.weight", np.zeros((tensor_elements // 8, 8), dtype=np.float32))
    for tensor in tensors:
        w.add_tensor(tensor, np.zeros((1, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _add_kv(w: gguf.GGUFWriter, arch: str, kv: Mapping[str, int | bool | str | list[int]] | None) -> None:
    for key, value in (kv or {}).items():
        name = key.format(arch=arch)
        if isinstance(value, bool):
            w.add_bool(name, value)
        elif isinstance(value, str):
            w.add_string(name, value)
        elif isinstance(value, list):
            w.add_array(name, value)
        elif value < 0:
            w.add_int32(name, value)
        else:
            w.add_uint32(name, value)


class GgufMaker:
    """``make_gguf(name, **options)`` writes ``write_gguf`` output under the test's temp folder."""

    base_vocab = BASE_VOCAB

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, name: str, **options: object) -> Path:
        return write_gguf(self.root / name, **options)  # type: ignore[arg-type]
