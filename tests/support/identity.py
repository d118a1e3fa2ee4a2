"""Greedy identity that tells a real divergence from a float tie.

llama.cpp's batched and single-token kernels sum in different orders, so
the same position's logits differ in the last bits between a verify batch
and plain one-token decoding. Where the target's two best tokens are that
close, the argmax can flip with the batch shape, and speculative output
then legitimately leaves plain greedy output. So at the first token where
two greedy outputs differ, the target's own logits at that position are
computed the plain way (prompt, then one token per decode): if the token
plain decoding chose beats the other by less than ``TIE_RELATIVE_GAP``
times the largest logit magnitude there, the difference is a tie; anything
more is a real divergence.

Why relative: float error grows with the size of the values summed, so the
gap is weighed against the largest |logit| at that position (logits reach
about 40 on the demo target, under 1 on the random test models). The bound
itself is ``specchat.core.engine.verify.TIE_RELATIVE_GAP``, one constant
shared with the race panel, covering what ``benchmarks/batch_shape_bound.py``
measures: how far the difference between two logits moves when the same
tokens are read in one call, in two, or as a verify batch instead of one
token per call, on the public prompts and on real documents of 1k-4k tokens
(docs/benchmarks.md, "Batch shape"). A wrong token from a real bug (a stale
recurrent state, a misplaced cut) is off by a sizeable fraction of the logit
range, far above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specchat.core.engine.sampling import apply_repetition_penalty
from specchat.core.engine.verify import TIE_RELATIVE_GAP
from specchat.core.types import SamplerParams

__all__ = ["TIE_RELATIVE_GAP", "Comparison", "assert_same_or_tie", "compare_greedy", "plain_greedy"]

DEFAULT_SAMPLER = SamplerParams()  # frozen: one shared default is safe


class TargetContext(Protocol):
    """What the checks drive: the target's llama.cpp context, local or remote (``Runtime.target_context``)."""

    def truncate(self, n_keep: int) -> None: ...

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray: ...


@dataclass(frozen=True)
class Comparison:
    """Two greedy outputs compared: identical, or where they part and by how much."""

    identical: bool
    index: int | None = None  # first differing position in the reply
    expected: int | None = None  # plain decoding's token there (None: its reply ended)
    got: int | None = None  # the other output's token there (None: its reply ended)
    gap: float | None = None  # logit(expected) - logit(got) in plain decoding, after penalties
    scale: float | None = None  # the largest |logit| there

    @property
    def tie(self) -> bool:
        if self.identical or self.gap is None or self.scale is None:
            return False
        return self.gap < TIE_RELATIVE_GAP * self.scale

    def describe(self) -> str:
        if self.identical:
            return "identical"
        gap = "n/a" if self.gap is None else f"{self.gap:.3g} (logits up to {self.scale:.3g})"
        kind = "tie" if self.tie else "divergence"
        return f"{kind} at reply token {self.index}: plain {self.expected}, got {self.got}, logit gap {gap}"


def plain_greedy(
    context: TargetContext,
    prompt: Sequence[int],
    n: int,
    sampler: SamplerParams = DEFAULT_SAMPLER,
    eog: frozenset[int] = frozenset(),
) -> list[int]:
    """The target alone: the prompt in one batch, then one token per decode, straight on a llama.cpp context."""
    ctx = context
    ctx.truncate(0)
    row = ctx.decode(list(prompt))[0]
    history = list(prompt)
    out: list[int] = []
    while len(out) < n:
        recent = history[-sampler.repeat_last_n :] if sampler.repeat_last_n else []
        token = int(np.argmax(apply_repetition_penalty(row, recent, sampler)))
        out.append(token)
        history.append(token)
        if token in eog:
            break
        row = ctx.decode([token])[0]
    return out


def compare_greedy(
    context: TargetContext,
    prompt: Sequence[int],
    plain: Sequence[int],
    got: Sequence[int],
    sampler: SamplerParams = DEFAULT_SAMPLER,
) -> Comparison:
    """Compare ``got`` with the plain greedy reply ``plain`` to ``prompt`` on the target's ``context``."""
    if list(plain) == list(got):
        return Comparison(True)
    i = next((j for j, (a, b) in enumerate(zip(plain, got, strict=False)) if a != b), min(len(plain), len(got)))
    expected = plain[i] if i < len(plain) else None
    other = got[i] if i < len(got) else None
    if expected is None or other is None:
        return Comparison(False, i, expected, other, None)
    ctx = context
    ctx.truncate(0)
    row = ctx.decode(list(prompt))[0]
    for token in plain[:i]:
        row = ctx.decode([token])[0]
    history = [*prompt, *plain[:i]]
    recent = history[-sampler.repeat_last_n :] if sampler.repeat_last_n else []
    scale = float(np.abs(row).max())
    row = apply_repetition_penalty(np.array(row, dtype=np.float64), recent, sampler)
    return Comparison(False, i, expected, other, float(row[expected] - row[other]), scale)


def assert_same_or_tie(
    context: TargetContext,
    prompt: Sequence[int],
    plain: Sequence[int],
    got: Sequence[int],
    sampler: SamplerParams = DEFAULT_SAMPLER,
    label: str = "",
) -> Comparison:
    """Fail unless ``got`` equals ``plain`` or first leaves it at a tie; return the comparison."""
    result = compare_greedy(context, prompt, plain, got, sampler)
    assert result.identical or result.tie, f"{label}: {result.describe()}"
    return result
