"""Turning a logits row into a probability distribution, in numpy.

One code path serves the target's p, the draft's q and plain decoding, so
"the same distribution" has a single meaning everywhere.

Order of the transforms: repetition penalty, temperature, min-p, top-k,
top-p. Min-p runs first because on logits it is a single threshold
(``logit >= max + T*ln(min_p)``), which makes the common case cheap even for
a 150k-token vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specchat.core.types import SamplerParams

# Stride for the top-k pre-filter: the k-th largest of a strided subsample is
# a lower bound on the k-th largest of the whole row, so thresholding on it
# keeps every true top-k candidate while touching the full row only once.
_TOPK_STRIDE = 64


@dataclass(frozen=True)
class Distribution:
    """A normalised distribution over a sorted set of token ids."""

    ids: np.ndarray  # int64, strictly increasing
    probs: np.ndarray  # float64, sums to 1

    @staticmethod
    def one_hot(token: int) -> Distribution:
        return Distribution(np.array([token], dtype=np.int64), np.array([1.0]))

    def prob(self, token: int) -> float:
        i = int(np.searchsorted(self.ids, token))
        if i < len(self.ids) and self.ids[i] == token:
            return float(self.probs[i])
        return 0.0

    def probs_at(self, tokens: np.ndarray) -> np.ndarray:
        """Probabilities of many token ids at once (0 outside the support)."""
        idx = np.searchsorted(self.ids, tokens)
        idx_clipped = np.minimum(idx, len(self.ids) - 1)
        hit = self.ids[idx_clipped] == tokens
        return np.where(hit, self.probs[idx_clipped], 0.0)

    def argmax(self) -> int:
        return int(self.ids[int(np.argmax(self.probs))])

    def max_prob(self) -> float:
        return float(self.probs.max())

    def sample(self, rng: np.random.Generator) -> int:
        u = rng.random()
        cdf = np.cumsum(self.probs)
        i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        return int(self.ids[min(i, len(self.ids) - 1)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


def residual(p: Distribution, q: Distribution) -> Distribution:
    """norm(max(0, p - q)): what to sample from after rejecting a draft from q."""
    r = np.maximum(p.probs - q.probs_at(p.ids), 0.0)
    total = r.sum()
    if total <= 0.0:
        # p <= q everywhere on p's support means p == q, where rejection has
        # probability 0; fall back to p rather than divide by zero.
        return p
    keep = r > 0.0
    return Distribution(p.ids[keep], r[keep] / total)


def apply_repetition_penalty(row: np.ndarray, history: Sequence[int], params: SamplerParams) -> np.ndarray:
    """llama.cpp's rule: divide positive logits of recent tokens by the penalty, multiply negative ones."""
    if params.repeat_penalty == 1.0 or params.repeat_last_n == 0 or not history:
        return row
    recent = np.unique(np.asarray(history[-params.repeat_last_n :], dtype=np.int64))
    out: np.ndarray = row.copy()
    vals = out[recent]
    out[recent] = np.where(vals > 0, vals / params.repeat_penalty, vals * params.repeat_penalty)
    return out


def greedy_token(row: np.ndarray, history: Sequence[int], params: SamplerParams) -> int:
    """The argmax after penalties: what temperature 0 picks."""
    return int(np.argmax(apply_repetition_penalty(row, history, params)))


def _top_k_candidates(row: np.ndarray, k: int) -> np.ndarray:
    n = row.shape[0]
    if k >= n:
        return np.arange(n)
    if n >= 16 * _TOPK_STRIDE and k * 4 <= n // _TOPK_STRIDE:
        sub = row[::_TOPK_STRIDE]
        bound = np.partition(sub, len(sub) - k)[len(sub) - k]
        cand = np.flatnonzero(row >= bound)
    else:
        cand = np.arange(n)
    if len(cand) > k:
        cand = cand[np.argpartition(row[cand], len(cand) - k)[len(cand) - k :]]
    return cand


def distribution(row: np.ndarray, history: Sequence[int], params: SamplerParams) -> Distribution:
    """The sampling distribution for one logits row under ``params``.

    At temperature 0 this is the distribution at temperature 1 with the same
    truncations (used for displaying probabilities); greedy decoding itself
    uses :func:`greedy_token`.
    """
    row = apply_repetition_penalty(row, history, params)
    temp = params.temperature if params.temperature > 0 else 1.0
    if params.min_p > 0.0:
        top = float(row.max())
        cand = np.flatnonzero(row >= top + temp * math.log(params.min_p))
        if params.top_k and len(cand) > params.top_k:
            cand = cand[np.argpartition(row[cand], len(cand) - params.top_k)[len(cand) - params.top_k :]]
    elif params.top_k:
        cand = _top_k_candidates(row, params.top_k)
        top = float(row[cand].max())  # the maximum is always among the top k
    else:
        top = float(row.max())
        cand = None
    if cand is None:
        # Dense path: stay in float32 (a 150k-row float64 copy costs more than the exp).
        z = np.exp((row - np.float32(top)) * np.float32(1.0 / temp))
        probs = z / z.sum(dtype=np.float64)
        ids = _arange(row.shape[0])
    else:
        order = np.argsort(cand, kind="stable")
        ids = cand[order].astype(np.int64)
        z = np.exp((row[ids].astype(np.float64) - top) / temp)
        probs = z / z.sum()
    if params.top_p < 1.0 and len(probs) > 1:
        by_prob = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[by_prob])
        n_keep = int(np.searchsorted(cum, params.top_p, side="left")) + 1
        keep = np.sort(by_prob[:n_keep])
        ids, probs = ids[keep], probs[keep]
        probs = probs / probs.sum()
    return Distribution(ids, probs)


_ARANGE_CACHE: dict[int, np.ndarray] = {}


def _arange(n: int) -> np.ndarray:
    """A shared, read-only 0..n-1 id array (the support of an untruncated distribution)."""
    ids = _ARANGE_CACHE.get(n)
    if ids is None:
        ids = np.arange(n, dtype=np.int64)
        ids.setflags(write=False)
        _ARANGE_CACHE[n] = ids
    return ids
