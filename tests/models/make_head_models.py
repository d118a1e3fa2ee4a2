"""Regenerate the random-weight drafter heads in this folder (never run by the tests or CI).

llama.cpp's ``test-llama-archs`` skips the head architectures, so these are
written directly with the gguf package, tensor by tensor, to the lists the
vendored loader expects (``src/models/eagle3.cpp``, ``src/models/dflash.cpp``):

* ``eagle3-llama.gguf``: an EAGLE-3 head (arch ``eagle3``) for ``llama.gguf``: one decoder
  layer, the fused-feature ``fc`` over three target layers, its own lm head, and the
  target's token embeddings (shared through ``ctx_other``, as published Llama 3.1 8B heads do);
* ``dflash-llama.gguf``: a DFlash block-diffusion head (arch ``dflash``), block size 8,
  non-causal, reading target layers 0 and 1, sharing the target's embeddings and lm head;
* ``dspark-llama.gguf``: the same with DSpark's Markov head and confidence head
  (``markov_w1``/``markov_w2``/``conf_proj``; llama-server tells it apart by ``markov_w1``);
* ``dflash2-llama.gguf``: DFlash2: the same block with grouped dynamic convolutions and the
  selector (top-4 candidates per slot and a score for each predecessor).

The tokenizer is copied from the target (as the converter does with
``--target-model-dir``), plus a mask token for the DFlash family. The Qwen3.5
test target has the same width and layer count, so the same heads serve it.

    python tests/models/make_head_models.py [--seed 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TARGET = HERE / "llama.gguf"
N_EMBD = 256  # the test targets' width (a head that shares their embeddings must match it)
N_VOCAB = 128
N_HEAD = 2
HEAD_DIM = 128
N_FF = 256
BLOCK_SIZE = 8
MASK_TOKEN = 127
MARKOV_RANK = 16
CONV_KERNEL = 3
CONV_GROUP = 64
SELECTOR_RANK = 16
SELECTOR_TOP_K = 4


def tokenizer_fields(target: Path) -> list[tuple[str, Any, Any, Any]]:
    """The target's tokenizer keys as (name, value, type, sub_type)."""
    import gguf

    reader = gguf.GGUFReader(target)
    out = []
    for name, field in reader.fields.items():
        if name.startswith("tokenizer."):
            out.append((name, field.contents(), field.types[0], field.types[-1]))
    return out


def write(path: Path, arch: str, keys: dict[str, Any], tensors: dict[str, np.ndarray], target: Path) -> None:
    import gguf

    writer = gguf.GGUFWriter(path, arch, use_temp_file=False)
    writer.add_name(f"specchat test {path.stem}")
    for name, value, main, sub in tokenizer_fields(target):
        if main == gguf.GGUFValueType.ARRAY:
            if value:  # the writer refuses empty arrays; llama.cpp needs none of them
                writer.add_key_value(name, value, main, sub_type=sub)
        else:
            writer.add_key_value(name, value, main)
    for name, value in keys.items():
        full = name if "." in name and name.split(".")[0] in ("tokenizer", "general") else f"{arch}.{name}"
        if isinstance(value, bool):
            writer.add_bool(full, value)
        elif isinstance(value, float):
            writer.add_float32(full, value)
        elif isinstance(value, list):
            writer.add_array(full, value)
        elif isinstance(value, str):
            writer.add_string(full, value)
        else:
            writer.add_uint32(full, int(value))
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class Weights:
    """Random weights, normal with stdev 0.1 as llama.cpp's tool makes them; norms are ones."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def mat(self, n_in: int, n_out: int) -> np.ndarray:
        # gguf shapes are {n_in, n_out}: numpy's row-major (n_out, n_in)
        return (self.rng.standard_normal((n_out, n_in)) * 0.1).astype(np.float16)

    @staticmethod
    def norm(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)


def common_keys(n_layer: int) -> dict[str, Any]:
    return {
        "vocab_size": N_VOCAB,
        "context_length": 256,
        "embedding_length": N_EMBD,
        "block_count": n_layer,
        "feed_forward_length": N_FF,
        "attention.head_count": N_HEAD,
        "attention.head_count_kv": N_HEAD,
        "attention.key_length": HEAD_DIM,
        "attention.value_length": HEAD_DIM,
        "attention.layer_norm_rms_epsilon": 1e-5,
        "rope.dimension_count": HEAD_DIM,
        "rope.freq_base": 10000.0,
    }


def eagle3(w: Weights) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    keys = common_keys(1) | {"target_layers": [0, 1, 1], "target_hidden_size": N_EMBD}
    attn_in = 2 * N_EMBD  # the normed token embedding and the normed fused features, concatenated
    tensors = {
        "fc.weight": w.mat(3 * N_EMBD, N_EMBD),
        "output_norm.weight": w.norm(N_EMBD),
        "output.weight": w.mat(N_EMBD, N_VOCAB),
        "blk.0.attn_norm.weight": w.norm(N_EMBD),
        "blk.0.attn_norm_2.weight": w.norm(N_EMBD),
        "blk.0.attn_q.weight": w.mat(attn_in, N_HEAD * HEAD_DIM),
        "blk.0.attn_k.weight": w.mat(attn_in, N_HEAD * HEAD_DIM),
        "blk.0.attn_v.weight": w.mat(attn_in, N_HEAD * HEAD_DIM),
        "blk.0.attn_output.weight": w.mat(N_HEAD * HEAD_DIM, N_EMBD),
        "blk.0.ffn_norm.weight": w.norm(N_EMBD),
        "blk.0.ffn_gate.weight": w.mat(N_EMBD, N_FF),
        "blk.0.ffn_down.weight": w.mat(N_FF, N_EMBD),
        "blk.0.ffn_up.weight": w.mat(N_EMBD, N_FF),
    }
    return keys, tensors


def dflash(w: Weights, *, dspark: bool = False, selector: bool = False) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    n_layer = 1
    keys = common_keys(n_layer) | {
        "target_layers": [0, 1],
        "block_size": BLOCK_SIZE,
        "attention.causal": False,
        "tokenizer.ggml.mask_token_id": MASK_TOKEN,
    }
    tensors = {
        "fc.weight": w.mat(2 * N_EMBD, N_EMBD),
        "enc.output_norm.weight": w.norm(N_EMBD),
        "output_norm.weight": w.norm(N_EMBD),
    }
    for i in range(n_layer):
        tensors |= {
            f"blk.{i}.attn_norm.weight": w.norm(N_EMBD),
            f"blk.{i}.attn_q.weight": w.mat(N_EMBD, N_HEAD * HEAD_DIM),
            f"blk.{i}.attn_k.weight": w.mat(N_EMBD, N_HEAD * HEAD_DIM),
            f"blk.{i}.attn_v.weight": w.mat(N_EMBD, N_HEAD * HEAD_DIM),
            f"blk.{i}.attn_output.weight": w.mat(N_HEAD * HEAD_DIM, N_EMBD),
            f"blk.{i}.attn_q_norm.weight": w.norm(HEAD_DIM),
            f"blk.{i}.attn_k_norm.weight": w.norm(HEAD_DIM),
            f"blk.{i}.ffn_norm.weight": w.norm(N_EMBD),
            f"blk.{i}.ffn_gate.weight": w.mat(N_EMBD, N_FF),
            f"blk.{i}.ffn_down.weight": w.mat(N_FF, N_EMBD),
            f"blk.{i}.ffn_up.weight": w.mat(N_EMBD, N_FF),
        }
    if selector:  # DFlash2: grouped dynamic convolutions around attention and FFN, and the selector lattice
        groups = N_EMBD // CONV_GROUP
        keys |= {
            "conv_kernel_size": CONV_KERNEL,
            "conv_group_size": CONV_GROUP,
            "selector_rank": SELECTOR_RANK,
            "selector_top_k": SELECTOR_TOP_K,
        }
        for i in range(n_layer):
            tensors |= {
                f"blk.{i}.attn_conv_base": (w.rng.standard_normal((2, CONV_KERNEL, N_EMBD)) * 0.1).astype(np.float32),
                f"blk.{i}.attn_conv_proj.weight": w.mat(N_EMBD, 2 * CONV_KERNEL * groups),
                f"blk.{i}.ffn_conv_base": (w.rng.standard_normal((2, CONV_KERNEL, N_EMBD)) * 0.1).astype(np.float32),
                f"blk.{i}.ffn_conv_proj.weight": w.mat(N_EMBD, 2 * CONV_KERNEL * groups),
            }
        tensors |= {
            "selector_predecessor.weight": w.mat(SELECTOR_RANK, N_VOCAB),
            "selector_successor.weight": w.mat(SELECTOR_RANK, N_VOCAB),
            "selector_hidden.weight": w.mat(N_EMBD, SELECTOR_RANK),
        }
    if dspark:
        keys |= {"sample_from_anchor": True, "has_confidence_head": True}
        tensors |= {
            "markov_w1.weight": w.mat(MARKOV_RANK, N_VOCAB),
            "markov_w2.weight": w.mat(MARKOV_RANK, N_VOCAB),
            "conf_proj.weight": w.mat(N_EMBD + MARKOV_RANK, 1).astype(np.float32),
            "conf_proj.bias": np.zeros(1, dtype=np.float32),
        }
    return keys, tensors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--target", type=Path, default=TARGET)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    heads = {
        "eagle3-llama.gguf": ("eagle3", eagle3(Weights(args.seed))),
        "dflash-llama.gguf": ("dflash", dflash(Weights(args.seed))),
        "dspark-llama.gguf": ("dflash", dflash(Weights(args.seed), dspark=True)),
        "dflash2-llama.gguf": ("dflash", dflash(Weights(args.seed), selector=True)),
    }
    for name, (arch, (keys, tensors)) in heads.items():
        path = args.out / name
        write(path, arch, keys, tensors, args.target)
        print(f"{path}: {path.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
