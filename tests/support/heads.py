"""Tiny head files (EAGLE-3, DFlash, DSpark headers): made up ones for a made-up target, or ones sharing a
real test model's vocabulary.

Only the header matters to what reads them here (describing, judging, finding, offering): the weights are
a placeholder tensor, so llama.cpp would refuse to load them as drafters.
"""

from __future__ import annotations

from pathlib import Path

from specchat.core.models.ggufmeta import read_gguf_info
from specchat.core.models.shape import read_model_shape
from support.gguf_files import GgufMaker, write_gguf

REPO = "acme/Llama-3.1-8B-Instruct-GGUF"


def write_head(
    path: Path,
    target: Path,
    kind: str = "eagle3",
    *,
    layers: list[int] | None = None,
    hidden: int | None = None,
    block: int = 8,
    base_model: str | None = "Test Llama",
) -> Path:
    """A head header for ``target`` (its tokenizer; layers and width that fit unless given)."""
    info = read_gguf_info(target, with_vocab=True)
    shape = read_model_shape(target)
    assert info.vocab is not None
    n = shape.n_layers
    fitting = [0, n // 2, n - 1] if kind == "eagle3" else [1, n - 1]  # ids below n: a llama graph has no layer n
    arch = "eagle3" if kind == "eagle3" else "dflash"
    kv: dict[str, int | bool | str | list[int]] = {  # the shape keys first, as the converters write them
        "{arch}.block_count": 1 if arch == "eagle3" else 2,
        "{arch}.attention.head_count": shape.n_head,
        "{arch}.target_layers": layers if layers is not None else fitting,
    }
    if arch == "eagle3":
        kv["{arch}.embedding_length"] = shape.n_embd
        kv["{arch}.target_hidden_size"] = hidden if hidden is not None else shape.n_embd
    else:
        kv["{arch}.embedding_length"] = hidden if hidden is not None else shape.n_embd
        kv["{arch}.block_size"] = block
    if base_model:
        kv["general.base_model.0.name"] = base_model
    return write_gguf(
        path,
        arch=arch,
        tokens=info.vocab.tokens,
        token_types=info.vocab.types,
        tokenizer_model=info.tokenizer_model or "gpt2",
        bos=info.bos_id,
        eos=info.eos_id,
        eot=info.eot_id,
        add_bos=info.add_bos,
        model_kv=kv,
        tensors=["markov_w1.weight"] if kind == "dspark" else [],
    )


TARGET_SHAPE = {"{arch}.block_count": 32, "{arch}.embedding_length": 64, "{arch}.attention.head_count": 4}


def target(make_gguf: GgufMaker, name: str = "Llama-3.1-8B-Instruct-Q4_K_M.gguf", **kw: object) -> Path:
    return make_gguf(name, model_kv=TARGET_SHAPE, basename="Meta-Llama-3.1", size_label="8B", **kw)


def eagle3(
    make_gguf: GgufMaker,
    name: str = "eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf",
    *,
    layers: list[int] | None = None,
    hidden: int = 64,
    **kw: object,
) -> Path:
    kv = {
        "{arch}.target_layers": layers if layers is not None else [2, 16, 29],
        "{arch}.target_hidden_size": hidden,
        "general.base_model.0.name": "Llama 3.1 8B Instruct",
    }
    return make_gguf(name, arch="eagle3", general_name="EAGLE3 LLaMA3.1 Instruct 8B", model_kv=kv, **kw)


def dflash(
    make_gguf: GgufMaker,
    name: str = "dflash-Llama-3.1-8B-Q8_0.gguf",
    *,
    dspark: bool = False,
    top_k: int = 0,
    anchor: bool | None = None,
    **kw: object,
) -> Path:
    kv: dict[str, object] = {
        "{arch}.target_layers": [1, 9, 17, 25, 31],
        "{arch}.embedding_length": 64,
        "{arch}.block_size": 8,
    }
    if top_k:
        kv["{arch}.selector_top_k"] = top_k
    if anchor is not None:
        kv["{arch}.sample_from_anchor"] = anchor
    return make_gguf(
        name,
        arch="dflash",
        general_name="LLaMA3.1-8B-Instruct-DFlash-UltraChat",
        model_kv=kv,
        tensors=["markov_w1.weight"] if dspark else [],
        **kw,
    )
