"""The composite drafter: each round, n-gram lookup, the model drafter, or a lookup span the model continues.

The candidates of a round are the lookup proposals (the continuation of the
latest earlier match of the last n tokens, for several n, in the
conversation and then in the optional lookup memory), the model drafter's
proposal (a draft model or the target's MTP heads) and, with a draft model,
the splice: a whole lookup span continued by the model. Each candidate at
each length gets an expected rate, expected tokens over expected seconds,
from acceptance kept per source, per match length and per position
(:class:`AcceptanceTable`) and from measured costs (the depth controller's
verify cost and overhead, the model's own draft timings; lookup is nearly
free). The choice is made before any token is drawn and depends only on
the committed text and past rounds, so every token is still drawn from the
q its source reports (one-hot for lookup) and the verdict stays lossless.
"""

from __future__ import annotations

import bisect
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specchat.core.engine.depth import DEFAULT_AUTO_START, logit, sigmoid
from specchat.core.engine.drafters import (
    Draft,
    Drafter,
    DraftModelDrafter,
    DraftRequest,
    MtpDrafter,
)
from specchat.core.engine.sampling import Distribution
from specchat.core.types import DrafterKind, DraftSource

MAX_NGRAM = 6
"""Longest n-gram the lookup searches for; every length down to 1 gives a candidate of its own."""
MAX_MATCH = 32
"""How far back a found match is followed to measure its real length (a copy's matches run long)."""
MATCH_KEYS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)
"""The acceptance table's lookup keys: the match length, exact up to 6 and bucketed above."""
MIN_MEMORY_NGRAM = 2
"""Shortest match looked up in the lookup memory: a single token there says little."""
POSITIONS = 8
"""Positions kept apart in the acceptance table; later positions share the last entry."""
MIN_HANDOVER_MATCH = 4
"""Shortest match (in tokens, the model's drafts included) a model draft hands over to a lookup at: open chat
keeps meeting a token or two seen before, and a lookup continuing those parts from the model within a token."""
UNMEASURED_TRIES = 3
"""Rounds forced to the model while it has never drafted (its costs unknown); after them it waits for probes."""
PROBE_EVERY = 8
"""After this many rounds without the model, one round drafts with it so its acceptance stays current
(every 16 let open chat start with a dozen plain rounds when the reply before it had not used the model)."""
PROBE_DEPTH = 3
CATCH_UP_SHARE = 0.5
"""Before it is measured: a token the draft model decodes to catch up costs this share of a drafting step."""
MIN_CATCH_UP = 4
"""Shortest catch-up (tokens) whose time measures the per-token cost: a shorter one is mostly the fixed part."""
MAX_VERIFY_SLOPE = 0.3
"""Each token a verify batch adds costs at most this share of a one-token pass (measured on CPUs: 0.1-0.2)."""
LOOKUP_PRIORS: dict[int, tuple[float, float]] = {
    1: (0.21, 0.58), 2: (0.57, 0.69), 3: (0.64, 0.72), 4: (0.70, 0.72), 5: (0.70, 0.78), 6: (0.75, 0.80),
    8: (0.80, 0.90), 12: (0.90, 0.95), 16: (0.95, 0.95), 24: (0.95, 0.95), 32: (0.97, 0.95),
}
"""Per match key: acceptance of a lookup's first token, and of each later one given those before it.

Measured from plain greedy replies on the demo pair over the benchmark prompts
(``benchmarks/composite.py --priors``: every reply position, every lookup
candidate there, scored against what the target wrote next; about 2,000
candidates), rounded and made to grow with the match (a longer match is
never trusted less; the raw figures at 4 and 5 tokens are noisy).
"""
CONFIDENCE_EDGES = (0.3, 0.5, 0.7, 0.85, 0.95, 0.99)
"""Lower edges of the buckets of a model draft's confidence (the probability the model gave it)."""
PRIOR_STRENGTH = 4.0
"""The priors weigh as much as this many observations of a cell, at first; they age as the cell's counts do."""
SHORT_MATCH = 6
"""Within a reply, lookups of matches up to this long share their counts, and so do the longer ones."""
REPLY_STRENGTH = 2.0
"""Within a reply, what every reply so far showed weighs as much as this many of the reply's own observations."""

# Sources pooled over positions; every other (MTP heads, drafter heads) guesses further ahead with each
# chained or block position, losing acceptance with it: their rates are kept per position.
_POOLED = frozenset({DraftSource.MODEL, DraftSource.LOOKUP})


def match_key(length: int) -> int:
    """The acceptance table's key for a lookup match of ``length`` tokens (0 for none)."""
    key = 0
    for k in MATCH_KEYS:
        if k <= length:
            key = k
    return key


def lookup_prior(match: int, position: int = 0) -> float:
    """Acceptance expected of a lookup at ``position`` before any is measured (``match``: its match key)."""
    first, later = LOOKUP_PRIORS[match_key(max(match, 1))]
    return first if position == 0 else later


def find_match(seq: np.ndarray, n: int, corpus: np.ndarray | None = None) -> tuple[int, int]:
    """The latest match of ``seq``'s last ``n`` tokens in ``corpus`` (``seq`` before its tail when None).

    Returns (follow, length): the index in the searched array of the token after
    the match, and how many tokens the match really covers, followed back up to
    :data:`MAX_MATCH`; (-1, 0) when there is none.
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
    while length < MAX_MATCH and start - (length - n) - 1 >= 0 and n_total - length - 1 >= 0 \
            and hay[start - (length - n) - 1] == seq[n_total - length - 1]:
        length += 1
    return start + n, length


class AcceptanceTable:
    """Per (source, key) and position: how often a draft there was accepted, given the ones before it were.

    Counts decay with each new observation of a cell, so the estimate follows a
    change within a few rounds, and start from a prior: for lookup the measured
    :data:`LOOKUP_PRIORS` of its match key, with the weight of
    :data:`PRIOR_STRENGTH` observations, aging with the cell's own (a long match's
    prior of 95% had kept 4 of a cell's 24 decayed observations for ever, and
    read 29% where 1 lookup in 20 was kept); for a model ``priors[source]``, with the
    weight of ``strength`` observations. With a ``parent`` (the figures of every
    reply so far, where this table holds one reply's), the parent's estimates
    are the priors, with the weight of ``strength`` observations: a reply that
    copies, or one that never does, shows it within a round or two.
    """

    def __init__(self, priors: dict[DraftSource, float], *, strength: float = 1.0, decay: float = 0.95,
                 parent: AcceptanceTable | None = None) -> None:
        self.priors = priors
        self.strength = strength
        self.decay = decay
        self.parent = parent
        self._cells: dict[tuple[DraftSource, int, int], tuple[float, float]] = {}  # -> (hits, tries)

    def rates(self, source: DraftSource, key: int, n: int) -> list[float]:
        """Estimated acceptance at positions 0..n-1 of a ``source`` span with ``key`` (the lookup's match key).

        A position seldom seen leans on the one before it (a lookup's on its measured prior where that is
        higher), so deep positions, checked only when shallower ones pass, start from what those showed.
        """
        if self.parent is not None:
            out = self.parent.rates(source, key, n)
            if source is not DraftSource.LOOKUP:
                return self._shifted(out, source, key)
            return self._lookup_shifted(out, key)
        if source is not DraftSource.LOOKUP:
            return self._model_rates(source, key, n)
        out = []
        estimate = lookup_prior(key, 0)
        for position in range(n):
            if position < POSITIONS:
                prior = max(estimate, lookup_prior(key, position)) if position else estimate
                hits, tries = self._cells.get((source, key, position), (0.0, 0.0))
                weight = PRIOR_STRENGTH * self._prior_left(tries)
                estimate = (hits + prior * weight) / (tries + weight)
            out.append(estimate)
        return out

    def _prior_left(self, tries: float) -> float:
        """The share of a prior's weight left after a cell's observations decayed to ``tries``.

        After n observations the counts hold ``(1 - decay**n) / (1 - decay)`` tries, and the prior, aged with
        them, ``decay**n`` of its weight: what the target keeps doing outweighs a prior measured elsewhere.
        """
        return 1.0 if self.decay >= 1.0 else max(0.0, 1.0 - tries * (1.0 - self.decay))

    def _shifted(self, rates: list[float], source: DraftSource, key: int) -> list[float]:
        """A model's ``rates`` (the parent's) moved in log-odds by this table's own counts, all positions pooled.

        One reply holds few rounds of any one depth: its counts say how well the model guesses here
        (a level) and the parent's, every reply's, say how that changes with the position (a shape).
        """
        hits, tries = self._totals(source, key)
        if not tries or self.parent is None:
            return rates
        return self._level_shifted(rates, hits, tries, self.parent.pooled(source, key))

    def _level_shifted(self, rates: list[float], hits: float, tries: float, base: float) -> list[float]:
        """``rates`` moved in log-odds as far as ``hits`` of ``tries`` (leaning on ``base``) are from ``base``."""
        shift = logit((hits + base * self.strength) / (tries + self.strength)) - logit(base)
        return [sigmoid(logit(r) + shift) for r in rates]

    def _lookup_shifted(self, rates: list[float], key: int) -> list[float]:
        """A lookup's ``rates`` (the parent's, for its match key) moved in log-odds by this reply's counts.

        The reply's lookups of short or of long matches (:meth:`_pool`) are
        scored against what the parent expected of them at the positions they
        reached, and every position moves by the difference: a reply whose
        lookups keep parting after a token or two (JSON whose keys repeat and
        whose values do not) lowers the later positions too, where a count per
        position had kept them at the parent's 95% and drafted 16-token lookups
        that kept one.
        """
        pool = self._pool(DraftSource.LOOKUP, key)
        hits, tries = self._totals(DraftSource.LOOKUP, pool)
        if not tries or not rates:
            return rates
        cells = self._positions(DraftSource.LOOKUP, pool)
        base = sum(t * rates[min(p, len(rates) - 1)] for p, (_, t) in enumerate(cells)) / tries
        return self._level_shifted(rates, hits, tries, base)

    def pooled(self, source: DraftSource, key: int) -> float:
        """A model's acceptance over every position, from its prior and this table's counts."""
        hits, tries = self._totals(source, key)
        return (hits + self.priors.get(source, 0.5) * self.strength) / (tries + self.strength)

    def _positions(self, source: DraftSource, key: int) -> list[tuple[float, float]]:
        """This table's (hits, tries) at each kept position."""
        return [self._cells.get((source, key, p), (0.0, 0.0)) for p in range(POSITIONS)]

    def _totals(self, source: DraftSource, key: int) -> tuple[float, float]:
        """This table's hits and tries over every position."""
        cells = self._positions(source, key)
        return sum(h for h, _ in cells), sum(t for _, t in cells)

    def _model_rates(self, source: DraftSource, key: int, n: int) -> list[float]:
        """A model's rates: for a draft model every position pooled; for MTP heads each position's own.

        A draft model guesses each token from the text the target sees, so its
        acceptance hardly depends on where in the round the token falls, and a
        position's own counts are few (deep ones are checked only in the rounds
        that draft that deep): their noise, moved by the reply's level and the
        confidence offsets, ended rounds at chance dips. MTP heads guess further
        ahead with every chained step and lose acceptance with it, so theirs are
        kept per position, each position's prior being the pooled rate with the
        weight of as many observations as it takes to expect one rejection at
        it; a position never checked takes the one before it.
        """
        pooled = self.pooled(source, key)
        if source in _POOLED:
            return [pooled] * n
        cells = self._positions(source, key)
        weight = max(self.strength, 1.0 / max(1.0 - pooled, 0.02))
        out: list[float] = []
        estimate = pooled
        for position in range(n):
            if position < POSITIONS:
                hits, tries = cells[position]
                if tries:
                    estimate = (hits + pooled * weight) / (tries + weight)
            out.append(estimate)
        return out

    def rate(self, source: DraftSource, key: int, position: int) -> float:
        """Estimated acceptance at ``position`` (see :meth:`rates`)."""
        return self.rates(source, key, position + 1)[position]

    def record(self, source: DraftSource, key: int, position: int, accepted: bool) -> None:
        """Count one draft at ``position``: accepted or not (only the first rejected one of a span counts)."""
        cell = (source, self._pool(source, key), min(position, POSITIONS - 1))
        hits, tries = self._cells.get(cell, (0.0, 0.0))
        self._cells[cell] = (self.decay * hits + (1.0 if accepted else 0.0), self.decay * tries + 1.0)
        if self.parent is not None:
            self.parent.record(source, key, position, accepted)

    def _pool(self, source: DraftSource, key: int) -> int:
        """A reply's own lookup counts are kept for short and long matches only: a reply has few of each key."""
        if self.parent is None or source is not DraftSource.LOOKUP:
            return key
        return SHORT_MATCH if key <= SHORT_MATCH else MATCH_KEYS[-1]

    def clear(self) -> None:
        """Forget this table's own counts (not the parent's)."""
        self._cells.clear()

    def record_span(self, source: DraftSource, key: int, start: int, length: int, n_accepted: int,
                    censored: bool = False) -> None:
        """Count a span of ``length`` drafts of which the first ``n_accepted`` were accepted.

        ``censored``: the outcome after them is unknown (the span ran past what was checked).
        """
        for i in range(min(n_accepted, length)):
            self.record(source, key, start + i, True)
        if n_accepted < length and not censored:
            self.record(source, key, start + n_accepted, False)


class Confidence:
    """How often a model draft was accepted, by the confidence the model had in it (decaying counts).

    A draft model that hesitates can be wrong far more often than its average
    says, and drafting on after such a token spends a decode on a likely loser;
    how much more depends on the pair (a quantized copy of the target agrees
    even where it hesitates), so every bucket starts from the model's average
    acceptance and only its own counts move it. A bucket's figure is kept as
    an offset from that average (in log-odds) and applied to the position's
    current rate: a reply where the model guesses well lifts every bucket.
    The average weighs as much as 8 drafts of a bucket: with 2, the hesitant
    bucket's few decayed counts (about 85% accepted) ended open chat's rounds
    after their first hesitant draft; replayed, 8 kept every prompt but one
    (15 tokens) within 5% of the better single drafter.
    """

    def __init__(self, *, strength: float = 8.0, decay: float = 0.98) -> None:
        self.strength = strength
        self.decay = decay
        self._cells = [(0.0, 0.0) for _ in range(len(CONFIDENCE_EDGES) + 1)]  # per bucket: (hits, tries)

    @staticmethod
    def bucket(prob: float) -> int:
        """The bucket of a draft the model gave probability ``prob``."""
        return bisect.bisect_right(CONFIDENCE_EDGES, prob)

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


@dataclass(frozen=True)
class Costs:
    """What one round costs, in seconds: the model's draft steps, and the target's verify and overhead."""

    model_fixed: float  # the model drafter's first draft in steady state (its 1-2 token catch-up and pass)
    model_step: float  # each further model draft: a decode plus its distribution and draw
    catch_up_token: float  # each token the draft model decodes (batched) to catch up before drafting
    verify: tuple[float, ...]  # verify[n]: a batch of n tokens (index 0 unused)
    overhead_plain: float
    overhead_drafted: float
    behind: int = 0  # committed tokens the draft model has not decoded yet (after lookup rounds)

    def model(self, n: int, span: int = 0) -> float:
        """The model drafting ``n`` tokens after a lookup span of ``span`` tokens."""
        if n == 0:
            return 0.0
        return self.model_fixed + (n - 1) * self.model_step + (self.behind + span) * self.catch_up_token

    def round(self, n_tokens: int, model_tokens: int, span: int) -> float:
        """Seconds for a round of ``n_tokens`` drafts: a lookup span of ``span``, then ``model_tokens`` model ones."""
        seconds = self.verify[n_tokens + 1] + (self.overhead_drafted if n_tokens else self.overhead_plain)
        return seconds + self.model(model_tokens, span)

    def sat_out(self, n_tokens: int, expected: float) -> float:
        """Seconds a round of ``n_tokens`` drafts without the model costs, ``expected`` tokens committed.

        A draft model decodes the tokens committed without it when it next drafts,
        in one batch: cheaper per token than its drafting steps but not free (about
        half a step per token on CPUs), so each such token is charged to the
        round that commits it; otherwise a lookup that keeps half its span looks
        cheaper than the model beside it, and is not. The model's next round pays
        the catch-up too (:attr:`behind`): it is paid then, and a reply whose
        copying runs to its end never pays it (m-proofread's last five tokens
        from the model cost a catch-up over the 31 tokens the lookup had copied).
        Replayed on the benchmark prompts (``benchmarks/composite_replay.py``),
        counting both worked better than either alone.
        """
        return self.round(n_tokens, 0, 0) + expected * self.catch_up_token


@dataclass(frozen=True)
class Candidate:
    """One way to draft a round: ``lookup`` tokens (from a match of ``match`` tokens) then ``model`` model tokens."""

    lookup: tuple[int, ...]
    match: int
    model: int
    rate: float  # expected tokens per second

    @property
    def label(self) -> str:
        if self.lookup and self.model:
            return "splice"
        if self.lookup:
            return "lookup"
        return "model" if self.model else "plain"


def choose(lookups: Sequence[tuple[int, tuple[int, ...]]], k: int, table: AcceptanceTable, costs: Costs,
           model_source: DraftSource | None, can_splice: bool) -> Candidate:
    """The candidate with the highest expected tokens per second (ties: the earlier, shorter one).

    ``lookups``: (match length, proposal) pairs; ``model_source``: None when no model can draft.
    A deterministic function of its arguments.
    """
    best = Candidate((), 0, 0, 1.0 / costs.sat_out(0, 1.0))

    def consider(lookup: tuple[int, ...], match: int, model: int, expected: float) -> None:
        nonlocal best
        n = len(lookup) + model
        seconds = costs.round(n, model, len(lookup)) if model else costs.sat_out(n, expected)
        rate = expected / seconds
        if rate > best.rate * (1.0 + 1e-9):
            best = Candidate(lookup, match, model, rate)

    model_rates = table.rates(model_source, 0, k) if model_source is not None else []

    def model_run(expected: float, survive: float, start_len: int, span: tuple[int, ...], match: int) -> None:
        for j in range(k - start_len):
            survive *= model_rates[j]
            expected += survive
            consider(span, match, j + 1, expected)

    if model_source is not None:
        model_run(1.0, 1.0, 0, (), 0)
    for match, proposal in lookups:
        expected, survive = 1.0, 1.0
        rates = table.rates(DraftSource.LOOKUP, match_key(match), min(len(proposal), k))
        for i in range(len(rates)):
            survive *= rates[i]
            expected += survive
            consider(proposal[: i + 1], match, 0, expected)
        span = proposal[:k]
        if can_splice and model_source is not None and len(span) < k and survive > 0.5:
            model_run(expected, survive, len(span), span, match)
    return best


def lookup_tail(model_rates: Sequence[float], lookup: tuple[int, tuple[int, ...]] | None, k: int,
                table: AcceptanceTable, costs: Costs) -> int:
    """How many tokens of ``lookup`` (match length, proposal) to draft after ``len(model_rates)`` model drafts.

    ``model_rates``: the acceptance estimated for each model draft. The count
    (possibly 0) with the highest expected tokens per second for the round; the
    lookup is nearly free, so only the verify cost of its tokens weighs against them.
    """
    n_model = len(model_rates)
    expected, survive = 1.0, 1.0
    for rate in model_rates:
        survive *= rate
        expected += survive
    best_n, best_rate = 0, expected / costs.round(n_model, n_model, 0)
    if lookup is None or n_model >= k:
        return 0
    match, proposal = lookup
    rates = table.rates(DraftSource.LOOKUP, match_key(match), min(len(proposal), k - n_model))
    before = expected
    for i, rate in enumerate(rates):
        survive *= rate
        expected += survive
        # The tail's tokens are committed without the draft model decoding them: it catches up on them later.
        round_rate = expected / (costs.round(n_model + i + 1, n_model, 0) + (expected - before) * costs.catch_up_token)
        if round_rate > best_rate * (1.0 + 1e-9):
            best_n, best_rate = i + 1, round_rate
    return best_n


STOP_GRID = np.linspace(0.0, 1.0, 257)
"""The survival probabilities a :class:`StopPlan` values drafting on at (interpolated between)."""


class StopPlan:
    """When a model drafting a round should stop: its drafts' confidence is seen one at a time.

    Drafting on is valued as tokens gained less ``rate`` times the seconds spent
    (the round's rate, found by re-planning at the rate the plan itself
    achieves: the ratio of expectations is what a long run of rounds gets),
    with the option to stop after any later draft. A fixed-depth estimate at
    the average acceptance misses that option: a pair whose sure drafts are
    nearly always right and whose hesitant ones often wrong drafts deep
    when its drafts are sure, and stops at the first hesitant one.
    ``gains[j]`` holds, over :data:`STOP_GRID`, the value of drafting the
    ``j+1``-th token when the round survives ``j`` drafts with that probability.
    """

    def __init__(self, position_rates: Sequence[float], shifts: np.ndarray, weights: np.ndarray,
                 step_costs: Sequence[float], rate: float) -> None:
        self.rate = rate
        self.gains: list[np.ndarray] = []
        self._tokens = np.zeros_like(STOP_GRID)  # expected tokens drafting on adds under the plan
        self._seconds = np.zeros_like(STOP_GRID)
        value = np.zeros_like(STOP_GRID)
        for j in range(len(step_costs) - 1, -1, -1):
            accept = 1.0 / (1.0 + np.exp(-(logit(position_rates[j]) + shifts)))
            after = STOP_GRID[:, None] * accept[None, :]  # survival after the next draft, per confidence bucket
            gain = (after + np.interp(after, STOP_GRID, value)) @ weights - rate * step_costs[j]
            go = gain > 0.0
            tokens = (after + np.interp(after, STOP_GRID, self._tokens)) @ weights
            seconds = step_costs[j] + np.interp(after, STOP_GRID, self._seconds) @ weights
            self._tokens = np.where(go | (j == 0), tokens, 0.0)
            self._seconds = np.where(go | (j == 0), seconds, 0.0)
            value = np.maximum(gain, 0.0)
            self.gains.append(gain)
        self.gains.reverse()

    def gain(self, drafted: int, survive: float) -> float:
        """The value of drafting one more after ``drafted`` drafts the round survives with probability ``survive``."""
        if drafted >= len(self.gains):
            return 0.0
        return float(np.interp(survive, STOP_GRID, self.gains[drafted]))

    def expected(self, survive: float) -> tuple[float, float]:
        """Tokens and seconds the model adds to a round under the plan, from its start (it drafts at least one)."""
        return (float(np.interp(survive, STOP_GRID, self._tokens)),
                float(np.interp(survive, STOP_GRID, self._seconds)))

    @classmethod
    def for_round(cls, position_rates: Sequence[float], confidence: Confidence, average: float, costs: Costs,
                  span: int, expected: float, survive: float, iterations: int = 2) -> StopPlan:
        """The plan for a round of up to ``len(position_rates)`` model drafts after a lookup ``span``.

        ``expected``, ``survive``: the span's expected tokens (with the target's own) and survival.
        """
        shifts, weights = confidence.shifts(average)
        verify = costs.verify
        step_costs = [(costs.model(1, span) if j == 0 else costs.model_step) + verify[span + j + 2]
                      - verify[span + j + 1] for j in range(len(position_rates))]
        base = costs.round(span, 0, span) if span else verify[1] + costs.overhead_drafted
        rate = expected / base
        plan = cls(position_rates, shifts, weights, step_costs, rate)
        for _ in range(iterations):
            tokens, seconds = plan.expected(survive)
            rate = max(rate, (expected + tokens) / (base + seconds))
            plan = cls(position_rates, shifts, weights, step_costs, rate)
        return plan


@dataclass
class _Pending:
    """A round's proposals, kept until the next round shows what the target committed."""

    base: int  # len(tokens) when drafted
    drafted: list[int]
    sources: list[DraftSource]
    match_lengths: list[int]
    probs: list[float]  # the probability each draft had from its source (1 for lookup)
    lookups: list[tuple[int, tuple[int, ...]]]  # every lookup proposal, drafted or not


class CompositeDrafter(Drafter):
    """Per round the best of n-gram lookup, the model drafter and their splice (see the module docstring)."""

    kind = DrafterKind.COMPOSITE
    own_depth = True

    def __init__(self, model: DraftModelDrafter | MtpDrafter | Drafter, *, memory: np.ndarray | None = None,
                 max_ngram: int = MAX_NGRAM) -> None:
        self.model = model
        self.model_source = model.source
        self.can_splice = isinstance(model, DraftModelDrafter)  # MTP heads draft only from the target's state
        self.memory = memory  # token ids of the lookup memory, searched after the conversation
        self.max_ngram = max_ngram
        # Every reply's figures, and this reply's on top of them (cleared when a reply starts).
        self.history = AcceptanceTable({self.model_source: 0.6})
        self.table = AcceptanceTable({}, strength=REPLY_STRENGTH, decay=1.0, parent=self.history)
        self.confidence = Confidence()
        self.wins: dict[str, int] = {"plain": 0, "lookup": 0, "model": 0, "splice": 0}
        # The model's costs in units of the target's one-token pass measured at the same time: a shared
        # machine's load moves both alike, so the ratio stays current while absolute timings go stale.
        self._model_fixed: float | None = None
        self._model_step: float | None = None
        self._catch_up: float | None = None  # per token the draft model decodes to catch up, the same units
        self._since_model = 0
        self._unmeasured_tries = 0
        self._first_round = False  # the next round is a reply's first
        self._pending: _Pending | None = None

    def prefill(self, tokens: Sequence[int]) -> None:
        self._pending = None
        self._first_round = True
        self.table.clear()
        self.model.prefill(tokens)

    def lookups(self, tokens: Sequence[int], k: int, *, memory: bool = True) -> list[tuple[int, tuple[int, ...]]]:
        """The distinct lookup proposals (real match length, tokens), the longest n-gram searched first.

        ``memory=False``: the conversation only, not the lookup memory (quick enough to ask every draft step).
        """
        seq = np.asarray(tokens, dtype=np.int64)
        found: list[tuple[int, tuple[int, ...]]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_ngram, len(seq) - 1), 0, -1):
            follow, length = find_match(seq, n)
            hay = seq
            if follow < 0 and memory and self.memory is not None and n >= MIN_MEMORY_NGRAM:
                follow, length = find_match(seq, n, self.memory)
                hay = self.memory
            if follow < 0:
                continue
            proposal = tuple(int(t) for t in hay[follow : follow + k])
            if proposal and proposal not in seen:
                seen.add(proposal)
                found.append((length, proposal))
        return found

    def costs(self, request: DraftRequest) -> Costs:
        """This round's cost estimates, from the depth controller and the model's own timings."""
        adaptive = request.costs
        n_max = request.k + 2
        if adaptive is not None and adaptive.measured_plain():
            verify = tuple(adaptive.verify_cost(n) for n in range(n_max))
            plain, drafted = adaptive.overhead(False), adaptive.overhead(True)
        else:
            verify = tuple(1.0 + 0.3 * (n - 1) for n in range(n_max))  # a CPU-like shape, in units of one pass
            plain = drafted = 0.0
        # A batch costs at most a few single passes' worth per extra token, whatever a stale fit says, and
        # never less than a smaller one: the controller floors batches at a measured one-token pass but
        # keeps a size's own measured bump, which can dip below its neighbour's and make the longer round
        # look cheaper than the shorter.
        verify = tuple(min(v, verify[1] * (1.0 + MAX_VERIFY_SLOPE * (n - 1))) if n > 1 else v
                       for n, v in enumerate(verify))
        verify = verify[:1] + tuple(np.maximum.accumulate(verify[1:]))
        step = (self._model_step if self._model_step is not None else 0.3) * verify[1]
        fixed = self._model_fixed * verify[1] if self._model_fixed is not None else step
        catch_up = 0.0  # MTP heads follow the target by themselves
        if self.can_splice:
            catch_up = self._catch_up * verify[1] if self._catch_up is not None else CATCH_UP_SHARE * step
        behind = self.model.behind(request.tokens) if isinstance(self.model, DraftModelDrafter) else 0
        return Costs(fixed, step, catch_up, verify, plain, drafted, behind)

    def draft(self, request: DraftRequest) -> Draft:
        tokens = request.tokens
        self._observe(tokens)
        k = request.k
        if k <= 0:
            return Draft()
        lookups = self.lookups(tokens, k)
        costs = self.costs(request)
        best = choose(lookups, k, self.table, costs, self.model_source, self.can_splice)
        plan: StopPlan | None = None
        if self._model_fixed is not None and not best.model:
            # choose() prices the model at fixed depths; the round it would really draft stops after a
            # hesitant draft, which is worth more where its sure drafts are nearly always right.
            plan = self._model_plan(k, costs)
            tokens_added, seconds = plan.expected(1.0)
            planned = (1.0 + tokens_added) / (costs.verify[1] + costs.overhead_drafted + seconds)
            if planned > best.rate * (1.0 + 1e-9):
                best = Candidate((), 0, k, planned)
        if not best.model and self._model_fixed is None and self._unmeasured_tries < UNMEASURED_TRIES:
            # The model's costs are unknown until it drafts: its first round drafts with it, at the depth
            # controller's start depth (the priors alone would price an unmeasured model at a tie with plain).
            # A few tries only: MTP heads below their p-min draft nothing, and lookup must not wait on them.
            self._unmeasured_tries += 1
            best = Candidate((), 0, min(DEFAULT_AUTO_START, k), 0.0)
        elif not best.model and (self._since_model >= PROBE_EVERY or (self._first_round and not best.lookup)):
            # Probes keep the model's acceptance current; a reply's first round that would be plain probes at
            # once, since a new reply can differ in character (an open question after an edit) and eight
            # plain rounds waiting for the next probe cost more than a short draft.
            best = Candidate(best.lookup if self.can_splice else (), best.match, min(PROBE_DEPTH, k), 0.0)
            if len(best.lookup) + best.model > k:
                best = Candidate((), 0, min(PROBE_DEPTH, k), 0.0)
        self._first_round = False
        self.wins[best.label] += 1
        out = Draft()
        span = list(best.lookup)
        out.tokens = span[:]
        out.q = [Distribution.one_hot(t) for t in span]
        out.probs = [1.0] * len(span)
        out.sources = [DraftSource.LOOKUP] * len(span)
        out.match_lengths = [best.match] * len(span)
        out.top = [((t, 1.0),) for t in span]
        if best.model:
            self._since_model = 0
            n, keep_going = best.model, None
            if best.rate > 0.0:  # a chosen round (not a probe): the model drafts on while its confidence pays
                n = k - len(span)
                keep_going = self._stopper(tokens, span, best.match, n, costs, plan if not span else None, lookups)
            self._draft_model(out, request, n, costs.verify[1], keep_going)
            if not span and out.tokens and len(out.tokens) < k:
                self._lookup_after_model(out, request, costs)
        else:
            self._since_model += 1
            out.step_seconds = 0.0 if span else None
        self._pending = _Pending(len(tokens), out.tokens[:], out.sources[:], out.match_lengths[:], out.probs[:],
                                 lookups)
        return out

    def _model_plan(self, n: int, costs: Costs, span: int = 0, expected: float = 1.0, survive: float = 1.0
                    ) -> StopPlan:
        """The stop plan for up to ``n`` model drafts after a lookup span (see :meth:`StopPlan.for_round`)."""
        average = self.history.pooled(self.model_source, 0)
        return StopPlan.for_round(self.table.rates(self.model_source, 0, n), self.confidence, average, costs, span,
                                  expected, survive)

    def _stopper(self, ahead: Sequence[int], span: Sequence[int], match: int, n: int, costs: Costs,
                 plan: StopPlan | None = None, lookups: Sequence[tuple[int, tuple[int, ...]]] = ()
                 ) -> Callable[[Sequence[int], Sequence[float]], bool]:
        """Whether the model should draft one more token after ``ahead`` (the committed text and a lookup
        ``span`` of it) and the drafts so far (at most ``n``).

        Asked with the model's drafts so far and their probabilities: their
        acceptance by confidence (:class:`Confidence`) says how likely the round
        still is to reach the next position, and a :class:`StopPlan` says
        whether drafting on pays from there, counting that a later hesitant
        draft can still end the round. The model stops, too, where its drafts
        have reached text seen before and a lookup would continue them better:
        the lookup then takes over (:meth:`_lookup_after_model`), as when a
        reply starts quoting the prompt. The lookup takes over only once the
        model has drafted the token the lookup proposed: a reply that copies
        text with changes (a renamed variable) parts from the lookup exactly
        where the model does, and one decode spent confirming is cheaper than a
        round lost on it; the round's own lookups (``lookups``, after ``ahead``)
        count as proposed, so a first draft that agrees with the longest of them
        confirms it (a reply that starts by repeating an earlier one hands over
        after one draft, not two). ``plan``: the plan for these drafts where the
        round's choice made it already.
        """
        model_rates = self.table.rates(self.model_source, 0, n)
        survive0 = expected0 = 1.0
        for rate in self.table.rates(DraftSource.LOOKUP, match_key(match), len(span)) if span else []:
            survive0 *= rate
            expected0 += survive0
        confidence, n_span, table, verify = self.confidence, len(span), self.table, costs.verify
        catch_up = costs.catch_up_token
        average = self.history.pooled(self.model_source, 0)
        if plan is None:
            plan = self._model_plan(n, costs, n_span, expected0, survive0)
        longest0 = None if span else _longest(lookups)
        proposed = [longest0[1][0]] if longest0 is not None else []  # the lookup's next token, as last asked

        def keep_going(tokens: Sequence[int], probs: Sequence[float]) -> bool:
            i = len(probs)
            if i >= n:
                return False
            survive = survive0
            for j, prob in enumerate(probs):
                survive *= confidence.rate(prob, model_rates[j], average)
            on = plan.gain(i, survive)
            if on <= 0.0:
                return False
            if n_span or not tokens:
                return True
            confirmed = proposed == [tokens[-1]]
            found = self.lookups([*ahead, *tokens], n - i, memory=False)
            longest = _longest(found)
            proposed[:] = [longest[1][0]] if longest is not None else []
            if longest is None or not confirmed or longest[0] < MIN_HANDOVER_MATCH:
                return True
            size = n_span + i
            gained, alive = 0.0, survive  # a lookup continuing the drafts instead
            for j, rate in enumerate(table.rates(DraftSource.LOOKUP, match_key(longest[0]), len(longest[1]))):
                alive *= rate
                gained += alive
                if gained - plan.rate * (verify[size + j + 2] - verify[size + 1] + gained * catch_up) > on:
                    return False
            return True

        return keep_going

    def _draft_model(self, out: Draft, request: DraftRequest, n: int, unit: float,
                     keep_going: Callable[[Sequence[int], Sequence[float]], bool] | None = None) -> None:
        """Append up to ``n`` model drafts after ``out``'s lookup span, and time them (in ``unit`` seconds)."""
        ahead = [*request.tokens, *out.tokens] if out.tokens else request.tokens
        started = time.perf_counter()
        drafted = self.model.draft(dataclasses.replace(request, tokens=ahead, k=n, keep_going=keep_going))
        seconds = time.perf_counter() - started
        out.tokens += drafted.tokens
        out.q += drafted.q
        out.probs += drafted.probs
        out.sources += [self.model_source] * len(drafted.tokens)
        out.match_lengths += [0] * len(drafted.tokens)
        out.top += drafted.top
        out.step_seconds, out.sync_seconds = drafted.step_seconds, drafted.sync_seconds
        out.sample_seconds = drafted.sample_seconds
        if drafted.catch_up >= MIN_CATCH_UP and drafted.catch_up_seconds is not None and self._model_fixed is not None:
            extra = drafted.catch_up_seconds / unit - self._model_fixed
            self._catch_up = _ema(self._catch_up, max(extra, 0.0) / (drafted.catch_up - 1))
        if not drafted.tokens:
            return
        sample = drafted.sample_seconds or 0.0
        if drafted.step_seconds is not None:
            self._model_step = _ema(self._model_step, (drafted.step_seconds + sample) / unit)
        # The first draft's cost: the model's catch-up when it was the usual one (a long catch-up after
        # lookup rounds, or over a splice's span, is paid once and says little about the next round).
        if drafted.sync_seconds is not None and out.sources[0] is not DraftSource.LOOKUP:
            self._model_fixed = _ema(self._model_fixed, (drafted.sync_seconds + sample) / unit)
        elif self._model_step is not None:
            # In step, the first draft costs about what a further one does: without this a first-draft
            # cost measured at a load spike stayed, since the probes after plain rounds all catch up long.
            self._model_fixed = _ema(self._model_fixed, self._model_step)
        elif self._model_fixed is None and len(drafted.tokens) == 1:
            self._model_fixed = seconds / unit

    def _lookup_after_model(self, out: Draft, request: DraftRequest, costs: Costs) -> None:
        """Continue the model's drafts with a lookup, where they reach text seen before (a copy's first words)."""
        ahead = [*request.tokens, *out.tokens]
        longest = _longest(self.lookups(ahead, request.k - len(out.tokens)))
        if longest is None:
            return
        n = lookup_tail(self.table.rates(self.model_source, 0, len(out.tokens)), longest, request.k,
                        self.table, costs)
        tail = list(longest[1][:n])
        out.tokens += tail
        out.q += [Distribution.one_hot(t) for t in tail]
        out.probs += [1.0] * n
        out.sources += [DraftSource.LOOKUP] * n
        out.match_lengths += [longest[0]] * n
        out.top += [((t, 1.0),) for t in tail]

    def _observe(self, tokens: Sequence[int]) -> None:
        """Score the previous round's drafts, and every lookup proposal, against what the target committed."""
        pending, self._pending = self._pending, None
        if pending is None or len(tokens) <= pending.base:
            return
        new = tokens[pending.base :]
        n_acc = _common_prefix(pending.drafted, new)
        # The drafted tokens, each source's span at its own positions.
        i = 0
        while i < len(pending.drafted):
            source, match = pending.sources[i], pending.match_lengths[i]
            j = i
            while j < len(pending.drafted) and pending.sources[j] is source:
                j += 1
            if i <= n_acc:  # the span was reached: the target checked it up to its first rejection
                self.table.record_span(source, match_key(match), 0, j - i, min(n_acc, j) - i)
                if source is self.model_source:
                    for t in range(i, min(j, n_acc + 1)):
                        self.confidence.record(pending.probs[t], t < n_acc)
            i = j
        # Lookup proposals not drafted: the committed tokens say how far they would have been kept.
        drafted_lookup = tuple(t for t, s in zip(pending.drafted, pending.sources, strict=True)
                               if s is DraftSource.LOOKUP)
        for match, proposal in pending.lookups:
            if drafted_lookup and proposal[: len(drafted_lookup)] == drafted_lookup:
                continue  # scored above
            c = _common_prefix(proposal, new)
            self.table.record_span(DraftSource.LOOKUP, match_key(match), 0, len(proposal), c,
                                   censored=c >= len(new))


def _longest(lookups: Sequence[tuple[int, tuple[int, ...]]]) -> tuple[int, tuple[int, ...]] | None:
    """The lookup proposal (match length, tokens) of the longest match, or None when there is none."""
    return max(lookups, key=lambda c: c[0]) if lookups else None


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _ema(old: float | None, new: float, decay: float = 0.8) -> float:
    return new if old is None else decay * old + (1 - decay) * new
