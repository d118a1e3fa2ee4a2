"""Facts about the installed llama.cpp and a model file, for the window and the terminal alike."""

from __future__ import annotations

from pathlib import Path

from specchat.core.build import BuildInfo
from specchat.core.llama.context import MemoryInfo, probe_memory
from specchat.core.llama.devices import build_info


def llama_build() -> BuildInfo:
    """What the installed llama.cpp build can do: GPU offload, its devices and their free memory."""
    return build_info()


def model_memory(path: str | Path) -> MemoryInfo:
    """Whether ``path`` is a dense, hybrid or recurrent model and how it takes drafts back (no weights read)."""
    return probe_memory(path)
