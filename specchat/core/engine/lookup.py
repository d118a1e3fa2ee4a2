"""Prompt lookup's matcher: where the last n tokens occurred before, and what followed them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

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


TEXT_MATCH = 32
"""How far back a match in a text is followed to compare it with the conversation's (the longest wins)."""
TEXT_MIN_NGRAM = 2
"""The shortest n-gram searched in a text beside the conversation: one token matches almost anywhere in a long one."""


def lookup_with_texts(
    seq: np.ndarray, k: int, max_ngram: int, min_ngram: int, texts: Sequence[LookupText]
) -> tuple[list[int], int, str]:
    """:func:`lookup_match` that also searches ``texts``: at the longest n with a match anywhere, the proposal
    whose match runs furthest back (the conversation's among equals); with that n and its text's name."""
    if not texts:
        proposal, n = lookup_match(seq, k, max_ngram, min_ngram)
        return proposal, n, ""
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        found = find_proposals(seq, n, k, texts, max_length=TEXT_MATCH, min_text_ngram=TEXT_MIN_NGRAM)
        if found:
            return list(found[0].tokens), n, found[0].origin
    return [], 0, ""


@dataclass(frozen=True)
class LookupText:
    """Token ids lookup searches beside the conversation, and the name its drafts carry ("" for none).

    ``preferred``: on a match as long as the conversation's, this text's proposal comes first (a prediction: it
    is what the reply is expected to be, so a copy of the same text is credited to it).
    """

    name: str
    tokens: np.ndarray
    preferred: bool = False

    @classmethod
    def of(cls, name: str, ids: Sequence[int], *, preferred: bool = False) -> LookupText:
        return cls(name, np.asarray(ids, dtype=np.int64), preferred)


class Found(NamedTuple):
    """A lookup proposal: the real length of its match, the tokens that followed it, and where (a text's name;
    "" for the conversation)."""

    match: int
    tokens: tuple[int, ...]
    origin: str = ""


def find_proposals(
    seq: np.ndarray,
    n: int,
    k: int,
    texts: Sequence[LookupText] = (),
    *,
    max_length: int,
    min_text_ngram: int = 1,
) -> list[Found]:
    """Every proposal of up to ``k`` tokens for ``seq``'s last ``n`` tokens: the conversation's latest match, then
    each text's (searched where ``n >= min_text_ngram``), longest match first (ties: a preferred text's, then
    that order); a conversation proposal that a preferred text proposes too is named after the text.

    Real match lengths are followed back up to ``max_length`` tokens.
    """
    found: list[tuple[int, int, Found]] = []  # (-match, rank, proposal): sorted, the best first
    follow, length = find_match(seq, n, max_length=max_length)
    if follow >= 0:
        found.append((-length, 1, Found(length, tuple(int(t) for t in seq[follow : follow + k]))))
    if n >= min_text_ngram:
        for i, text in enumerate(texts):
            follow, length = find_match(seq, n, text.tokens, max_length=max_length)
            if follow >= 0:
                proposal = Found(length, tuple(int(t) for t in text.tokens[follow : follow + k]), text.name)
                found.append((-length, 0 if text.preferred else 2 + i, proposal))
    found.sort(key=lambda f: f[:2])
    proposals = [f for _, _, f in found if f.tokens]
    # The conversation's copy of a preferred text (an attachment the window also put in the prompt) is that
    # text's: where both propose the same tokens, the draft is named after the text even where the
    # conversation's match runs a token or two longer (into the text before the attachment's block).
    preferred = {text.name for text in texts if text.preferred}
    named = {f.tokens: f.origin for f in reversed(proposals) if f.origin in preferred}  # the best one's name last
    return [f._replace(origin=named[f.tokens]) if not f.origin and f.tokens in named else f for f in proposals]


RESUME_LOOK_BACK = 16
"""How far back a copy an edit broke off is looked for (see :func:`find_break`)."""
RESUME_ALIGNED = 8
"""How long a match must be to count as a copy there."""
RESUME_REACH = 8
"""How far past the edit's length the copy's next word is looked for (see :func:`resume_copy`)."""

INSERTED = -1
"""A guessed resume's match length (:func:`guess_resumed`): the copy goes on where it broke off, past the reply's
inserted tokens (a comma added)."""
REPLACED = -2
"""A guessed resume's match length: the copy goes on past as many of its tokens as the reply wrote instead (a word
corrected)."""


@dataclass(frozen=True)
class BrokenCopy:
    """A copy an edit broke off (see :func:`find_break`): ``edit`` tokens ago the text ended in a match; ``hay``
    (the conversation or a text, named ``origin``) goes on at ``follow``; a copy of the conversation is searched
    before ``end``; ``preferred``: the preferred texts (a prediction) of the search."""

    edit: int
    hay: np.ndarray
    follow: int
    end: int
    origin: str
    preferred: tuple[LookupText, ...] = ()

    def named(self, tokens: Sequence[int]) -> str:
        """The name drafts of ``tokens`` from this copy carry: its origin, or for a copy of the conversation that a
        preferred text holds too, that text's (as a match of both is named): OpenAI counts accepted prediction
        tokens by what of the prediction the reply holds, whichever text a copy was found in."""
        return self.origin or preferred_holder(self.preferred, tokens)


def find_break(seq: np.ndarray, texts: Sequence[LookupText] = (), *, look_back: int, aligned: int) -> BrokenCopy | None:
    """The latest point, at most ``look_back`` tokens back, where ``seq`` ended in a match of at least ``aligned``
    tokens (in the conversation before it, or in a text); None where there is none. A preferred text's copy is
    looked for before the conversation's (see :func:`find_proposals`)."""
    total = len(seq)
    # A preferred text (a prediction) first, as find_proposals names a copy of it after it; None: the conversation.
    preferred = tuple(text for text in texts if text.preferred)
    sources = [*preferred, None, *(text for text in texts if not text.preferred)]
    for edit in range(1, min(look_back, total - aligned) + 1):
        head = seq[: total - edit]
        for source in sources:
            corpus = None if source is None else source.tokens
            follow, _ = find_match(head, aligned, corpus)
            if follow < 0:
                continue
            # The conversation's copy is searched before the edit, and its proposal may run on into the reply.
            if source is None:
                return BrokenCopy(edit, seq, follow, len(head) - 1, "", preferred)
            return BrokenCopy(edit, source.tokens, follow, len(source.tokens), source.name)
    return None


def preferred_holder(texts: Sequence[LookupText], tokens: Sequence[int]) -> str:
    """The name of the first preferred text (a prediction) that holds ``tokens`` in a row; "" where none does."""
    want = np.asarray(tokens, dtype=np.int64)
    n = len(want)
    for text in texts:
        hay = text.tokens
        if not text.preferred or n == 0 or len(hay) < n:
            continue
        for at in np.flatnonzero(hay[: len(hay) - n + 1] == want[0]):
            if np.array_equal(hay[at : at + n], want):
                return text.name
    return ""


def resume_copy(seq: np.ndarray, k: int, broken: BrokenCopy, *, reach: int) -> Found | None:
    """Where ``broken`` resumes: a proposal of up to ``k`` tokens, its match length 0; None where it has not
    come back yet.

    The copy resumes where ``seq``'s last n tokens (n = 3 down to 1, at most the edit's length) occur next to
    where it broke off: at most 2 tokens before it and ``reach`` past the edit's length after it, the nearest
    occurrence. One token matches almost anywhere in a long text; next to a copy just broken off it is where
    the copy goes on (a proofread's corrected word, a renamed variable).
    """
    total, edit, hay, follow = len(seq), broken.edit, broken.hay, broken.follow
    for n in range(min(3, edit), 0, -1):
        lo, hi = max(n, follow - 2), min(broken.end, follow + edit + reach)
        pattern = seq[total - n :]
        at = [p for p in range(lo, hi) if np.array_equal(hay[p - n : p], pattern)]
        if at:
            p = min(at, key=lambda q: abs(q - (follow + edit)))
            tokens = tuple(int(t) for t in hay[p : p + k])
            return Found(0, tokens, broken.named(tokens)) if tokens else None
    return None


def guess_resumed(k: int, broken: BrokenCopy) -> list[Found]:
    """Where ``broken`` may resume while the reply's edit has no token of the copy yet: right where it broke off
    (match length :data:`INSERTED`), and past as many of its tokens as the edit is long (:data:`REPLACED`).
    Which kind of edit a reply makes (punctuation added, words corrected) its acceptance table learns."""
    hay, follow = broken.hay, broken.follow
    found: list[Found] = []
    for match, at in ((INSERTED, follow), (REPLACED, follow + broken.edit)):
        tokens = tuple(int(t) for t in hay[at : at + k])
        if tokens and all(tokens != f.tokens for f in found):
            found.append(Found(match, tokens, broken.named(tokens)))
    return found
