"""Names for people: a GGUF file's readable name and where the library found it.

A file's ``general.name`` is often what a converter made of a training folder's name
("Smollm2 135M 8k Lc100K Mix1 Ep2"), title-cased, while its file name is what the
hub, llama.cpp and other apps show ("SmolLM2-135M-Instruct"). :func:`display_name`
takes ``general.name`` when its words are those of the file name (with the file
name's casing where that has capitals), else the file name.
"""

from __future__ import annotations

import re

from specchat.core.models.ggufmeta import GgufInfo
from specchat.core.models.hub import quant_of

_SPLIT_RE = re.compile(r"-\d{5}-of-\d{5}$", re.IGNORECASE)
_WORDS_RE = re.compile(r"[-_\s]+")
_GENERIC = {"", "model", "ggml-model", "ggml_model", "gguf", "unsloth", "weights"}
SOURCE_LABELS = {
    "hf-cache": "Hugging Face cache",
    "specchat": "specchat's models folder",
    "user": "your folder",
    "lm-studio": "LM Studio",
    "llama.cpp": "llama.cpp cache",
    "in use": "in use (its folder is not scanned)",
    "demo": "offline demo",
}


def file_stem(filename: str) -> str:
    """``SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``SmolLM2-135M-Instruct``: no folder, extension, part or quant."""
    stem = filename.rsplit("/", 1)[-1]
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    stem = _SPLIT_RE.sub("", stem)
    quant = quant_of(filename)
    if quant:
        stem = re.sub(rf"[-_.]?{re.escape(quant)}$", "", stem, flags=re.IGNORECASE)
    return stem.strip("-_. ")


def display_name(info: GgufInfo) -> str:
    """The name to show for a model file (see the module docstring)."""
    stem = file_stem(info.path.name)
    name = " ".join(info.name.split())
    if stem.lower() in _GENERIC:
        return name or info.path.name
    stem_words = {w.lower(): w for w in _WORDS_RE.split(stem) if w}
    words = name.split()
    if not words or any(w.lower() not in stem_words for w in words):
        return stem
    # a word the file name spells with capitals ("SmolLM2") keeps them; others keep general.name's spelling
    spelled = (stem_words[w.lower()] for w in words)
    return " ".join(s if s != s.lower() else w for s, w in zip(spelled, words, strict=True))


def source_label(source: str, filename: str = "") -> str:
    """Where a library file was found, in words (``hf-cache`` -> ``Hugging Face cache``); the demo's files by name."""
    from specchat.core.models.demo import DRAFT_FILENAME, TARGET_FILENAME

    if filename in (DRAFT_FILENAME, TARGET_FILENAME):
        return SOURCE_LABELS["demo"]
    return SOURCE_LABELS.get(source, source)
