"""The parts of a split GGUF model (``name-00001-of-00003.gguf`` ...)."""

from __future__ import annotations

import re
from pathlib import Path

_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def split_parts(path: Path) -> list[Path]:
    """All parts of a split model given any one of them (just ``[path]`` when not split)."""
    m = _SPLIT_RE.search(path.name)
    if not m:
        return [path]
    n = int(m.group(2))
    stem = path.name[: m.start()]
    return [path.with_name(f"{stem}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
