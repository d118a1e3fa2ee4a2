"""Acceptance learning: how often the target keeps a draft, by who drafted it, where and how sure it was.

:class:`AcceptanceTable` keeps, per source (lookup, the model) and key (a
lookup's match length) and per position in the round, decaying counts of drafts
the target kept, starting from priors (:data:`tuning.LOOKUP_PRIORS` for
lookup, :data:`tuning.MODEL_PRIOR` for the model). :class:`Confidence` keeps
how often a model draft was kept by the probability the model gave it. Both
learn only from drafts the target checked; the composite asks them for rates
and never the other way round.
"""

from __future__ import annotations

import bisect

import numpy as np

from specchat.core.engine.composite import tuning
from specchat.core.engine.depth import logit, sigmoid
from specchat.core.types import DraftSource


def match_key(length: int) -> int:
    """The acceptance table's key for a lookup match of ``length`` tokens (0 for none, and for a resumed copy; a
    guess of where a copy resumes keeps its own negative length)."""
    if length < 0:
        return length
    key = 0
    for k in tuning.MATCH_KEYS:
        if k <= length:
            key = k
    return key


def lookup_prior(match: int, position: int = 0) -> float:
    """Acceptance expected of a lookup at ``position`` before any is measured (``match``: its match key)."""
    first, later = tuning.LOOKUP_PRIORS[match_key(match)]
    return first if position == 0 else later


class AcceptanceTable:
    """Per (source, key) and position: how often a draft there was accepted, given the ones before it were.

    A lookup's cells are kept per ``origin`` too (the text it drafted from: "" for the conversation, else an
    attachment's or the prediction's name), so each text is weighed by what the target keeps of it.

    Counts decay with each new observation of a cell, so the estimate follows a
    change within a few rounds, and start from a prior: for lookup the measured
    :data:`tuning.LOOKUP_PRIORS` of its match key, with the weight of
    :data:`tuning.PRIOR_STRENGTH` observations that ages as the cell's own counts
    grow (so what the target keeps doing outweighs a prior measured elsewhere);
    for a model ``priors[source]``, with the weight of ``strength``
    observations. One table holds every reply's figures. ``by_position``: a model's acceptance is kept per
    position, not pooled (:attr:`~specchat.core.engine.drafters.Drafter.acceptance_by_position`).
    """

    def __init__(
        self,
        priors: dict[DraftSource, float],
        *,
        strength: float = tuning.MODEL_PRIOR_STRENGTH,
        decay: float = tuning.TABLE_DECAY,
        by_position: bool = False,
    ) -> None:
        self.priors = priors
        self.strength = strength
        self.decay = decay
        self.by_position = by_position
        self._cells: dict[tuple[DraftSource, str, int, int], tuple[float, float]] = {}  # -> (hits, tries)

    def rates(self, source: DraftSource, key: int, n: int, origin: str = "") -> list[float]:
        """Estimated acceptance at positions 0..n-1 of a ``source`` span with ``key`` (the lookup's match key).

        A position seldom seen leans on the one before it (a lookup's on its measured prior where that is
        higher), so deep positions, checked only when shallower ones pass, start from what those showed.
        """
        if source is not DraftSource.LOOKUP:
            return self._model_rates(source, key, n)
        out = []
        estimate = lookup_prior(key, 0)
        for position in range(n):
            if position < tuning.POSITIONS:
                prior = max(estimate, lookup_prior(key, position)) if position else estimate
                hits, tries = self._cells.get((source, origin, key, position), (0.0, 0.0))
                weight = tuning.PRIOR_STRENGTH * self._prior_left(tries)
                estimate = (hits + prior * weight) / (tries + weight)
            out.append(estimate)
        return out

    def _prior_left(self, tries: float) -> float:
        """The share of a prior's weight left after a cell's observations decayed to ``tries``.

        After n observations the counts hold ``(1 - decay**n) / (1 - decay)`` tries, and the prior, aged with
        them, ``decay**n`` of its weight: what the target keeps doing outweighs a prior measured elsewhere.
        """
        return 1.0 if self.decay >= 1.0 else max(0.0, 1.0 - tries * (1.0 - self.decay))

    def pooled(self, source: DraftSource, key: int) -> float:
        """A model's acceptance over every position, from its prior and this table's counts."""
        hits, tries = self._totals(source, key)
        return (hits + self.priors.get(source, 0.5) * self.strength) / (tries + self.strength)

    def _positions(self, source: DraftSource, key: int) -> list[tuple[float, float]]:
        """This table's (hits, tries) at each kept position."""
        return [self._cells.get((source, "", key, p), (0.0, 0.0)) for p in range(tuning.POSITIONS)]

    def _totals(self, source: DraftSource, key: int) -> tuple[float, float]:
        """This table's hits and tries over every position."""
        cells = self._positions(source, key)
        return sum(h for h, _ in cells), sum(t for _, t in cells)

    def _model_rates(self, source: DraftSource, key: int, n: int) -> list[float]:
        """A model's rates: every position pooled, or with :attr:`by_position` each position's own.

        A draft model guesses each token from the text the target sees, so its
        acceptance hardly depends on where in the round the token falls, and a
        position's own counts are few (deep ones are checked only in the rounds
        that draft that deep). Heads that chain their own guesses lose
        acceptance with every step, so theirs are kept per position, each
        position's prior being the pooled rate with the weight of as many
        observations as it takes to expect one rejection at it; a position
        never checked takes the one before it.
        """
        pooled = self.pooled(source, key)
        if not self.by_position:
            return [pooled] * n
        cells = self._positions(source, key)
        weight = max(self.strength, 1.0 / max(1.0 - pooled, 0.02))
        out: list[float] = []
        estimate = pooled
        for position in range(n):
            if position < tuning.POSITIONS:
                hits, tries = cells[position]
                if tries:
                    estimate = (hits + pooled * weight) / (tries + weight)
            out.append(estimate)
        return out

    def rate(self, source: DraftSource, key: int, position: int, origin: str = "") -> float:
        """Estimated acceptance at ``position`` (see :meth:`rates`)."""
        return self.rates(source, key, position + 1, origin)[position]

    def record(self, source: DraftSource, key: int, position: int, accepted: bool, origin: str = "") -> None:
        """Count one draft at ``position``: accepted or not (only the first rejected one of a span counts)."""
        cell = (source, origin, key, min(position, tuning.POSITIONS - 1))
        hits, tries = self._cells.get(cell, (0.0, 0.0))
        self._cells[cell] = (self.decay * hits + (1.0 if accepted else 0.0), self.decay * tries + 1.0)

    def record_span(
        self,
        source: DraftSource,
        key: int,
        start: int,
        length: int,
        n_accepted: int,
        censored: bool = False,
        origin: str = "",
    ) -> None:
        """Count a span of ``length`` drafts of which the first ``n_accepted`` were accepted.

        ``censored``: the outcome after them is unknown (the span ran past what was checked).
        """
        for i in range(min(n_accepted, length)):
            self.record(source, key, start + i, True, origin)
        if n_accepted < length and not censored:
            self.record(source, key, start + n_accepted, False, origin)


class Confidence:
    """How often a model draft was accepted, by the confidence the model had in it (decaying counts).

    A draft model that hesitates can be wrong far more often than its average
    says, and drafting on after such a token spends a decode on a likely loser;
    how much more depends on the pair (a quantized copy of the target agrees
    even where it hesitates), so every bucket starts from the model's average
    acceptance, weighing :data:`tuning.CONFIDENCE_STRENGTH` drafts, and only its own
    counts move it. A bucket's figure is kept as an offset from that average
    (in log-odds) and applied to the position's current rate: a reply where
    the model guesses well lifts every bucket.
    """

    def __init__(self, *, strength: float = tuning.CONFIDENCE_STRENGTH, decay: float = tuning.CONFIDENCE_DECAY) -> None:
        self.strength = strength
        self.decay = decay
        self._cells = [(0.0, 0.0) for _ in range(len(tuning.CONFIDENCE_EDGES) + 1)]  # per bucket: hits, tries

    @staticmethod
    def bucket(prob: float) -> int:
        """The bucket of a draft the model gave probability ``prob``."""
        return bisect.bisect_right(tuning.CONFIDENCE_EDGES, prob)

    def rate(self, prob: float, position_rate: float, average: float) -> float:
        """Estimated acceptance of a model draft with probability ``prob``.

        ``position_rate``: the model's rate at the draft's position now; ``average``: its rate over the
        same drafts these counts cover (every reply's).
        """
        hits, tries = self._cells[self.bucket(prob)]
        if not tries:
            return position_rate
        bucket = (hits + average * self.strength) / (tries + self.strength)
        return sigmoid(logit(position_rate) + logit(bucket) - logit(average))

    def shifts(self, average: float) -> tuple[np.ndarray, np.ndarray]:
        """Per bucket, its log-odds offset from ``average`` and how often drafts fall in it (weights sum to 1).

        Nothing measured yet: a single bucket with no offset.
        """
        tries = np.array([t for _, t in self._cells])
        if tries.sum() <= 0.0:
            return np.zeros(1), np.ones(1)
        offsets = [logit((h + average * self.strength) / (t + self.strength)) - logit(average) for h, t in self._cells]
        return np.array(offsets), tries / tries.sum()

    def record(self, prob: float, accepted: bool) -> None:
        """Count one model draft the target checked."""
        b = self.bucket(prob)
        hits, tries = self._cells[b]
        self._cells[b] = (self.decay * hits + (1.0 if accepted else 0.0), self.decay * tries + 1.0)
