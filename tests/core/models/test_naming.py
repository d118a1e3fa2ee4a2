"""Readable model names and sources for the library."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specchat.core.models.ggufmeta import read_gguf_info
from specchat.core.models.naming import display_name, file_stem, source_label
from support.gguf_files import GgufMaker


@pytest.mark.parametrize(
    ("general_name", "filename", "shown"),
    [
        ("Smollm2 135M 8k Lc100K Mix1 Ep2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
        ("Smollm2 135M Instruct", "SmolLM2-135M-Instruct-Q8_0.gguf", "SmolLM2 135M Instruct"),
        ("Qwen2.5 7B Instruct", "qwen2.5-7b-instruct-q4_k_m.gguf", "Qwen2.5 7B Instruct"),
        ("Llama 3.1 8B", "model.gguf", "Llama 3.1 8B"),
        (
            "Meta Llama 3.1 8B Instruct",
            "Meta-Llama-3.1-8B-Instruct-Q4_K_M-00001-of-00002.gguf",
            "Meta Llama 3.1 8B Instruct",
        ),
        ("", "Phi-3-mini-F16.gguf", "Phi-3-mini"),
    ],
)
def test_display_name(make_gguf: GgufMaker, general_name: str, filename: str, shown: str) -> None:
    info = read_gguf_info(make_gguf("x.gguf"))
    assert display_name(dataclasses.replace(info, name=general_name, path=Path(filename))) == shown


def test_file_stem_and_sources() -> None:
    assert file_stem("F16/Tiny-1B-F16-00001-of-00002.gguf") == "Tiny-1B"
    assert source_label("hf-cache") == "Hugging Face cache"
    assert source_label("in use", "SmolLM2-135M-Instruct.Q4_1.gguf") == "offline demo"
    assert source_label("in use", "x.gguf") == "in use (its folder is not scanned)"
    assert source_label("something-new") == "something-new"
