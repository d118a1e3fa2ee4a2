"""Requantize a GGUF file with llama.cpp's own quantizer."""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from specchat.core.llama.backend import ensure_backend
from specchat.core.llama.model import check_gguf_file
from specchat.core.types import SpecchatError

FTYPES = {
    "F32": llama_cpp.LLAMA_FTYPE_ALL_F32,
    "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
}


def requantize(source: Path, dest: Path, quant: str, *, n_threads: int = 0) -> None:
    """Write ``source`` re-encoded in ``quant`` (a key of :data:`FTYPES`) to ``dest``."""
    ensure_backend()
    check_gguf_file(source)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[quant]
    params.allow_requantize = True
    params.nthread = n_threads
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(dest).encode(), params)
    if rc != 0:
        raise SpecchatError(f"llama.cpp could not convert {source.name} to {quant} (code {rc})")


def convert_to_f32(source: Path, dest: Path, *, n_threads: int = 0) -> None:
    """Write ``source`` re-encoded with every tensor in F32 to ``dest``."""
    requantize(source, dest, "F32", n_threads=n_threads)
