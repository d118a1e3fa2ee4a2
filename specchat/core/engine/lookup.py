"""Prompt lookup's matcher: where the last n tokens occurred before, and what followed them."""

from __future__ import annotations

import numpy as np


def find_match(
    seq: np.ndarray, n: int, corpus: np.ndarray | None = None, *, max_length: int | None = None
) -> tuple[int, int]:
    """The latest match of ``seq``'s last ``n`` tokens in ``corpus`` (``seq`` before its tail when None).

    Returns (follow, length): the index in the searched array of the token after
    the match, and how many tokens the match covers: ``n``, or with ``max_length``
    its real length, followed back up to that many tokens. (-1, 0) when there is none.
    """
    n_total = len(seq)
    if n < 1 or n >= n_total + (0 if corpus is None else 1):
        return -1, 0
    hay = seq if corpus is None else corpus
    limit = (n_total - n) if corpus is None else len(hay) - n
    if limit <= 0:
        return -1, 0
    pattern = seq[n_total - n :]
    mask = hay[:limit] == pattern[0]
    for j in range(1, n):
        mask &= hay[j : limit + j] == pattern[j]
    starts = np.flatnonzero(mask)
    if not len(starts):
        return -1, 0
    start = int(starts[-1])
    length = n
    while (
        length < (max_length or 0)
        and start - (length - n) - 1 >= 0
        and n_total - length - 1 >= 0
        and hay[start - (length - n) - 1] == seq[n_total - length - 1]
    ):
        length += 1
    return start + n, length


def lookup_match(seq: np.ndarray, k: int, max_ngram: int, min_ngram: int) -> tuple[list[int], int]:
    """Up to k tokens that followed the latest earlier match of ``seq``'s last n tokens, the longest n from
    ``max_ngram`` down to ``min_ngram`` that has one; with that n (([], 0) when none has)."""
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        follow, _ = find_match(seq, n)
        if follow >= 0:
            return [int(t) for t in seq[follow : follow + k]], n
    return [], 0
