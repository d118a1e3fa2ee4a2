"""What the model picker says about a chosen pair before loading it: the verdict, the memory fit, the heads.

Each reads GGUF files (vocabularies take seconds), so the picker asks for them
on its verdict thread (:mod:`specchat.ui.pair_verdicts`), never on the GUI thread.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from specchat.core.models.fit import MachineMemory, fit_files
from specchat.core.models.heads import HeadCheck, check_head, heads_beside, read_head
from specchat.core.models.info_cache import INFOS, InfoCache
from specchat.core.models.pairs import compatibility_text
from specchat.core.models.shape import ModelShape, read_model_shape
from specchat.core.types import SpecchatError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PairQuestion:
    """A pair as typed in the picker's fields, and what to judge its fit against."""

    target: str
    draft: str
    n_ctx: int
    memory: MachineMemory


@dataclass(frozen=True)
class PairFacts:
    """The picker's lines on a pair: the compatibility verdict, the memory fit ("" until the target exists)
    and the heads beside the target, each judged against it."""

    verdict: str
    fit: str
    heads: tuple[HeadCheck, ...]


def pair_facts(question: PairQuestion, infos: InfoCache = INFOS) -> PairFacts:
    """Everything the picker shows on ``question``'s pair; a bad file gets a one-line reason, never an error."""
    target, draft = question.target, question.draft
    return PairFacts(
        compatibility_text(target, draft, infos),
        memory_text(target, draft, question.n_ctx, question.memory),
        tuple(heads_text(target, infos)),
    )


def memory_text(target: str, draft: str, n_ctx: int, memory: MachineMemory) -> str:
    """Whether the chosen files fit this machine, or "" until the target exists."""
    t = Path(target).expanduser() if target else None
    if t is None or not t.is_file():
        return ""
    d = Path(draft).expanduser() if draft else None
    try:
        return fit_files(t, d if d is not None and d.is_file() else None, n_ctx, memory, read=_cached_shape).text
    except (SpecchatError, OSError) as exc:
        return f"cannot tell: {exc}"


def heads_text(target: str, infos: InfoCache = INFOS) -> list[HeadCheck]:
    """The heads beside ``target`` on disk, each judged against it ([] until the target exists)."""
    t = Path(target).expanduser() if target else None
    if t is None or not t.is_file():
        return []
    return list(_heads(str(t), t.stat().st_mtime_ns, t.parent.stat().st_mtime_ns, infos))


@functools.lru_cache(maxsize=32)
def _heads(target: str, _mtime: int, _folder_mtime: int, infos: InfoCache) -> tuple[HeadCheck, ...]:
    """Cached per version of the target and of its folder (a head added or removed changes the folder)."""
    out = []
    for path in heads_beside(target):
        try:
            head = read_head(path)
            if head is not None:
                out.append(check_head(target, head, infos.get(target)))
        except (SpecchatError, OSError) as exc:
            log.info("not offering %s: %s", path, exc)
    return tuple(out)


def _cached_shape(path: Path) -> ModelShape:
    return _shape(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _shape(path: str, _mtime: int) -> ModelShape:
    """Cached per file version: the picker asks on every keystroke."""
    return read_model_shape(path)
