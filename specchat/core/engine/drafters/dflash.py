"""Drafting with a DFlash head: one block of drafts from a single non-causal decode.

The head (llama.cpp's ``draft-dflash``) keeps the target's layer features in
its own cache, so it needs no prefill. A round decodes ``[last, mask, ...]``
once and reads the block's logits: draft i is drawn from row i, with the
repetition history of the drafts before it, so q is the distribution each
token was drawn from and the exact rule holds at any temperature (a block
position does not see the drafts drawn before it, which costs acceptance,
not exactness). Its depth is bounded by the trained block (block size - 1
drafts); the block costs one decode whatever its length, so each further
draft's step is only its sampling.

DFlash2 heads add a selector: each position offers its top-k candidates and
a score for every (predecessor, candidate) pair, and the draft walks that
lattice; q of a draft is the softmax of its predecessor's scores.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest, SizedContext, draft_from
from specchat.core.engine.sampling import Distribution
from specchat.core.engine.verify import top
from specchat.core.types import DrafterKind, DraftSource


class HeadBlock(Protocol):
    """One decoded block: a :class:`specchat.core.llama.heads.Block`."""

    logits: np.ndarray  # (slots, n_vocab)
    confidence: np.ndarray | None  # DSpark: per slot
    candidates: np.ndarray | None  # DFlash2: (slots, top_k)
    scores: np.ndarray | None  # DFlash2: (slots, top_k, top_k)


class BlockHead(Protocol):
    """What the DFlash-family drafters drive: a :class:`specchat.core.llama.heads.DFlashContext`."""

    @property
    def target(self) -> SizedContext: ...

    @property
    def max_draft(self) -> int: ...

    def block(self, token: int, pos: int, n_draft: int) -> HeadBlock | None: ...


class DFlashDrafter(Drafter):
    """A DFlash (or DFlash2) head: each round one block decode, up to its trained block of drafts."""

    kind = DrafterKind.DFLASH
    acceptance_by_position = True  # each chained or block position guesses further ahead
    source = DraftSource("dflash")

    def __init__(self, head: BlockHead) -> None:
        self.head = head

    def draft(self, request: DraftRequest) -> Draft:
        out = Draft()
        head = self.head
        tokens = request.tokens
        k = min(request.k, head.max_draft, head.target.n_ctx - len(tokens))
        if k <= 0:
            return out
        started = time.perf_counter()
        block = head.block(tokens[-1], len(tokens) - 1, k)
        if block is None:
            return out  # the head is behind the target: a plain round
        synced = time.perf_counter()
        if block.candidates is not None and block.scores is not None:
            _walk_lattice(out, block.candidates, block.scores, dataclasses.replace(request, k=k), synced)
        else:
            self._read(out, block, dataclasses.replace(request, k=k), synced)
        out.sync_seconds = synced - started  # the block decode, paid every round
        return out

    def _read(self, out: Draft, block: HeadBlock, request: DraftRequest, synced: float) -> None:
        rows = block.logits[: request.k]
        if len(rows) == 0:
            return
        draft_from(out, rows[0], _rows_after(rows), dataclasses.replace(request, k=len(rows)), synced)


def _rows_after(rows: np.ndarray) -> Callable[[int], np.ndarray]:
    """``step(x)`` for :func:`~.base.draft_from`: the block's next row, whatever was drawn."""
    state = {"i": 0}

    def step(_token: int) -> np.ndarray:
        state["i"] += 1
        row: np.ndarray = rows[state["i"]]
        return row

    return step


def _walk_lattice(out: Draft, candidates: np.ndarray, scores: np.ndarray, request: DraftRequest, synced: float) -> None:
    """DFlash2: draw each draft among its position's candidates, from the softmax of its predecessor's scores."""
    temperature = request.sampler.temperature
    greedy = request.sampler.greedy or request.greedy
    predecessor = 0  # the anchor's row (position 1 scores every predecessor alike)
    for i in range(min(request.k, len(candidates))):
        s = scores[i, predecessor].astype(np.float64)
        s = s / temperature if temperature > 0 and not greedy else s
        probs = np.exp(s - s.max())
        probs /= probs.sum()
        best = int(np.argmax(probs))
        if request.p_min and probs[best] < request.p_min:
            break
        j = best if greedy else int(request.rng.choice(len(probs), p=probs))
        q = _candidates_distribution(candidates[i], probs)
        x = int(candidates[i, j])
        out.tokens.append(x)
        out.q.append(Distribution.one_hot(x) if greedy else q)
        out.probs.append(float(probs[j]))
        out.top.append(top(q))
        predecessor = j
        if request.cancel.cancelled or x in request.eog:
            break
        if request.keep_going is not None and not request.keep_going(out.tokens, out.probs):
            break
    if out.tokens:
        out.step_seconds = 0.0  # the block held every position
        out.sample_seconds = (time.perf_counter() - synced) / len(out.tokens)


def _candidates_distribution(ids: Sequence[int] | np.ndarray, probs: np.ndarray) -> Distribution:
    order = np.argsort(np.asarray(ids, dtype=np.int64), kind="stable")
    return Distribution(np.asarray(ids, dtype=np.int64)[order], probs[order].astype(np.float64))
