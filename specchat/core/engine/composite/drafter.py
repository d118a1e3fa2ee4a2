"""The composite drafter: each round, n-gram lookup or the model drafter (its drafts continued by a lookup).

Each round the composite lists its candidates: the lookup proposals (what
followed the latest earlier match of the last n tokens, for several n, in the
conversation and then in the optional lookup memory), the model drafter's
proposal (a draft model or the target's MTP heads). Each
candidate at each length gets an expected rate, expected tokens over expected
seconds: acceptance from :class:`AcceptanceTable` (per source, match length
and position) and :class:`Confidence` (per model draft's probability), costs
from the round-cost model (:class:`~specchat.core.engine.costs.CostView`) and
the model's own timings (lookup is nearly free). :meth:`CompositeDrafter.decide`
picks the round; a model round drafts on while :class:`StopPlan` says the
next draft pays, and hands over to a lookup where its drafts reach text seen
before. Every choice depends only on the committed text and past rounds, so
each token is still drawn from the q its source reports (one-hot for lookup)
and the verdict stays lossless.
"""

from __future__ import annotations

import bisect
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specchat.core.engine.costs import STEP_GUESS, unmeasured_verify_costs
from specchat.core.engine.depth import DEFAULT_AUTO_START, logit, sigmoid
from specchat.core.engine.drafters import Draft, Drafter, DraftRequest
from specchat.core.engine.lookup import find_match
from specchat.core.engine.realised import RealisedCosts
from specchat.core.engine.sampling import Distribution
from specchat.core.types import DrafterKind, DraftSource

# The composite's tuning, in one place. Each constant: what it does; after "Set:", the measurement that set it,
# or "unmeasured" where it was chosen and no measurement has tested it. docs/benchmarks.md ("The composite's
# constants") has the same table with the figures.

# Lookup: the candidates, and the keys their acceptance is kept under.
# Longest n-gram looked up; each shorter one down to 1 is a candidate too. Set: unmeasured.
MAX_NGRAM = 6
# How far back a found match is followed to measure its real length. Set: lookup priors (--priors), up to 32.
MAX_MATCH = 32
# Match lengths whose acceptance is kept apart: exact up to 6, bucketed above. Set: lookup priors (--priors).
MATCH_KEYS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)
# Shortest match looked up in the lookup memory (a single token there says little). Set: unmeasured.
MIN_MEMORY_NGRAM = 2
# Per match key: the first token's acceptance, and each later one's given those before it. Set: lookup priors
# (benchmarks/composite.py --priors, about 2,000 candidates), rounded and made to grow with the match.
LOOKUP_PRIORS: dict[int, tuple[float, float]] = {
    1: (0.21, 0.58), 2: (0.57, 0.69), 3: (0.64, 0.72), 4: (0.70, 0.72), 5: (0.70, 0.78), 6: (0.75, 0.80),
    8: (0.80, 0.90), 12: (0.90, 0.95), 16: (0.95, 0.95), 24: (0.95, 0.95), 32: (0.97, 0.95),
}

# Acceptance tables: how they start, learn and forget.
# Draft positions kept apart; later ones share the last. Set: unmeasured.
POSITIONS = 8
# A lookup prior weighs this many observations at first, ageing with the cell's own. Set: unmeasured.
PRIOR_STRENGTH = 4.0
# Of every reply's figures, a cell keeps this share per new observation of it. Set: unmeasured.
TABLE_DECAY = 0.95
# The model's acceptance before any is counted, and the observations it weighs. Set: the depth controller's prior.
MODEL_PRIOR = 0.6
MODEL_PRIOR_STRENGTH = 1.0
# Lower edges of the buckets of a model draft's probability. Set: unmeasured.
CONFIDENCE_EDGES = (0.3, 0.5, 0.7, 0.85, 0.95, 0.99)
# The model's average weighs as much as this many drafts of a bucket. Set: replay of 2026-11-30 (2 against 8).
CONFIDENCE_STRENGTH = 8.0
# A bucket keeps this share of its counts per new draft in it. Set: unmeasured.
CONFIDENCE_DECAY = 0.98

# Rounds: forced model rounds, probes, hand-overs.
# Rounds forced to a model that has never drafted. Set: a test with unsure MTP heads (not a speed measurement).
UNMEASURED_TRIES = 3
# Rounds without the model after which one probes it. Set: live benchmark of 2026-11-29 (16 against 8).
PROBE_EVERY = 8
# How many tokens a probe drafts. Set: unmeasured.
PROBE_DEPTH = 3
# Shortest match (the model's drafts included) a model round hands over to a lookup at. Set: replay of open chat.
MIN_HANDOVER_MATCH = 4

# What rounds took (RealisedCosts), against the model of costs.
# Rounds after which an arm not run since (plain, lookup, the model) is tried again. Set: on a busy machine the
# model of costs kept lookup for six replies (issue 36); a try of each other arm costs a few percent of the rounds.
RETRY_EVERY = 24
# Replies in a row without the model after which a try of it may read the prompt (a read is a reply's one-off
# cost, so a try that needs one waits for this). Set: tries that read in every reply cost a fifth of the rate
# under load (benchmarks/busy_default.py); issue 36 saw six replies in a row without the model.
READ_RETRY_REPLIES = 3

# The model's costs, in units of the target's one-token pass measured at the same time.
# Each new timing of the model weighs 1 minus this. Set: unmeasured.
TIMING_DECAY = 0.8
# A catch-up token before one is timed, in drafting steps. Set: the replay's costs (4.5 ms against a 9.5 ms step).
CATCH_UP_SHARE = 0.5
# Shortest catch-up timed per token (a shorter one is mostly its fixed part). Set: unmeasured.
MIN_CATCH_UP = 4
# Fewest prompt tokens read whose time says what a token's read costs. Set: unmeasured.
MIN_READ = 16

# The stop plan's resolution. Set: unmeasured (numerical).
STOP_GRID = np.linspace(0.0, 1.0, 257)  # the survival probabilities drafting on is valued at
PLAN_ITERATIONS = 2  # re-plannings at the rate the plan achieves


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


class AcceptanceTable:
    """Per (source, key) and position: how often a draft there was accepted, given the ones before it were.

    Counts decay with each new observation of a cell, so the estimate follows a
    change within a few rounds, and start from a prior: for lookup the measured
    :data:`LOOKUP_PRIORS` of its match key, with the weight of
    :data:`PRIOR_STRENGTH` observations that ages as the cell's own counts
    grow (so what the target keeps doing outweighs a prior measured elsewhere);
    for a model ``priors[source]``, with the weight of ``strength``
    observations. One table holds every reply's figures. ``by_position``: a model's acceptance is kept per
    position, not pooled (:attr:`~specchat.core.engine.drafters.Drafter.acceptance_by_position`).
    """

    def __init__(self, priors: dict[DraftSource, float], *, strength: float = MODEL_PRIOR_STRENGTH,
                 decay: float = TABLE_DECAY, by_position: bool = False) -> None:
        self.priors = priors
        self.strength = strength
        self.decay = decay
        self.by_position = by_position
        self._cells: dict[tuple[DraftSource, int, int], tuple[float, float]] = {}  # -> (hits, tries)

    def rates(self, source: DraftSource, key: int, n: int) -> list[float]:
        """Estimated acceptance at positions 0..n-1 of a ``source`` span with ``key`` (the lookup's match key).

        A position seldom seen leans on the one before it (a lookup's on its measured prior where that is
        higher), so deep positions, checked only when shallower ones pass, start from what those showed.
        """
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
        cell = (source, key, min(position, POSITIONS - 1))
        hits, tries = self._cells.get(cell, (0.0, 0.0))
        self._cells[cell] = (self.decay * hits + (1.0 if accepted else 0.0), self.decay * tries + 1.0)

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
    acceptance, weighing :data:`CONFIDENCE_STRENGTH` drafts, and only its own
    counts move it. A bucket's figure is kept as an offset from that average
    (in log-odds) and applied to the position's current rate: a reply where
    the model guesses well lifts every bucket.
    """

    def __init__(self, *, strength: float = CONFIDENCE_STRENGTH, decay: float = CONFIDENCE_DECAY) -> None:
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
    # Per arm (plain, lookup, model): what its rounds took lately over what this model predicted (RealisedCosts).
    factors: dict[str, float] = field(default_factory=dict)

    def factor(self, n_tokens: int, model_tokens: int) -> float:
        """The realised factor of a round of ``n_tokens`` drafts, the first ``model_tokens`` the model's."""
        return self.factors.get(arm_of(n_tokens, model_tokens), 1.0)

    def model(self, n: int) -> float:
        """The model drafting ``n`` tokens (and catching up first)."""
        if n == 0:
            return 0.0
        return self.model_fixed + (n - 1) * self.model_step + self.behind * self.catch_up_token

    def round(self, n_tokens: int, model_tokens: int) -> float:
        """Seconds for a round of ``n_tokens`` drafts of which the first ``model_tokens`` are the model's."""
        return self.predicted(n_tokens, model_tokens) * self.factor(n_tokens, model_tokens)

    def predicted(self, n_tokens: int, model_tokens: int) -> float:
        """:meth:`round` as the model of costs alone predicts it (no realised factor)."""
        seconds = self.verify[n_tokens + 1] + (self.overhead_drafted if n_tokens else self.overhead_plain)
        return seconds + self.model(model_tokens)

    def sat_out(self, n_tokens: int, expected: float) -> float:
        """Seconds a round of ``n_tokens`` drafts without the model costs, ``expected`` tokens committed.

        A model that follows the text decodes the tokens committed without it
        when it next drafts, in one batch: cheaper per token than its drafting
        steps but not free, so each such token is charged to the round that
        commits it. The model's next round pays the catch-up too
        (:attr:`behind`): it is paid then, and a reply whose copying runs to its
        end never pays it.
        """
        return self.round(n_tokens, 0) + expected * self.catch_up_token


def arm_of(n_tokens: int, model_tokens: int) -> str:
    """The arm a round of ``n_tokens`` drafts, ``model_tokens`` of them the model's, belongs to."""
    return "model" if model_tokens else "lookup" if n_tokens else "plain"


@dataclass(frozen=True)
class Candidate:
    """One way to draft a round: ``lookup`` tokens (from a match of ``match`` tokens) or ``model`` model tokens."""

    lookup: tuple[int, ...]
    match: int
    model: int
    rate: float  # expected tokens per second

    @property
    def label(self) -> str:
        return arm_of(len(self.lookup), self.model)


def choose(lookups: Sequence[tuple[int, tuple[int, ...]]], k: int, table: AcceptanceTable, costs: Costs,
           model_source: DraftSource | None, *, floor: bool = True) -> Candidate:
    """The candidate with the highest expected tokens per second (ties: the earlier, shorter one).

    ``lookups``: (match length, proposal) pairs; ``model_source``: None when no model can draft;
    ``floor=False``: a drafting candidate even where a plain round is expected to be faster.
    A deterministic function of its arguments.
    """
    best = Candidate((), 0, 0, 1.0 / costs.sat_out(0, 1.0) if floor else -1.0)

    def consider(lookup: tuple[int, ...], match: int, model: int, expected: float) -> None:
        nonlocal best
        n = len(lookup) + model
        seconds = costs.round(n, model) if model else costs.sat_out(n, expected)
        rate = expected / seconds
        if rate > best.rate * (1.0 + 1e-9):
            best = Candidate(lookup, match, model, rate)

    if model_source is not None:
        expected, survive = 1.0, 1.0
        for j, rate in enumerate(table.rates(model_source, 0, k)):
            survive *= rate
            expected += survive
            consider((), 0, j + 1, expected)
    for match, proposal in lookups:
        expected, survive = 1.0, 1.0
        rates = table.rates(DraftSource.LOOKUP, match_key(match), min(len(proposal), k))
        for i in range(len(rates)):
            survive *= rates[i]
            expected += survive
            consider(proposal[: i + 1], match, 0, expected)
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
    best_n, best_rate = 0, expected / costs.round(n_model, n_model)
    if lookup is None or n_model >= k:
        return 0
    match, proposal = lookup
    rates = table.rates(DraftSource.LOOKUP, match_key(match), min(len(proposal), k - n_model))
    before = expected
    for i, rate in enumerate(rates):
        survive *= rate
        expected += survive
        # The tail's tokens are committed without the draft model decoding them: it catches up on them later.
        round_rate = expected / (costs.round(n_model + i + 1, n_model) + (expected - before) * costs.catch_up_token)
        if round_rate > best_rate * (1.0 + 1e-9):
            best_n, best_rate = i + 1, round_rate
    return best_n


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
                  iterations: int = PLAN_ITERATIONS) -> StopPlan:
        """The plan for a round of up to ``len(position_rates)`` model drafts."""
        shifts, weights = confidence.shifts(average)
        verify = costs.verify
        step_costs = [(costs.model(1) if j == 0 else costs.model_step) + verify[j + 2] - verify[j + 1]
                      for j in range(len(position_rates))]
        base = verify[1] + costs.overhead_drafted
        rate = 1.0 / base  # the target's own token
        plan = cls(position_rates, shifts, weights, step_costs, rate)
        for _ in range(iterations):
            tokens, seconds = plan.expected(1.0)
            rate = max(rate, (1.0 + tokens) / (base + seconds))
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
    arm: str = "plain"  # the candidate's label: plain, lookup or model
    number: int = 0  # the composite's round count
    started: float = 0.0  # time.perf_counter() when the round began drafting (its choice made)
    read_seconds: float = 0.0  # the model's prompt read in the round (a one-off, priced apart)
    predicted: float = 0.0  # the round's seconds as the model of costs predicted them for its drafts


class CompositeDrafter(Drafter):
    """Per round the better of n-gram lookup and the model drafter (see the module docstring)."""

    kind = DrafterKind.COMPOSITE
    own_depth = True

    def __init__(self, model: Drafter, *, memory: np.ndarray | None = None, max_ngram: int = MAX_NGRAM) -> None:
        self.model = model
        self.model_source = model.source
        self.memory = memory  # token ids of the lookup memory, searched after the conversation
        self.max_ngram = max_ngram
        self.table = AcceptanceTable({self.model_source: MODEL_PRIOR}, by_position=model.acceptance_by_position)
        self.confidence = Confidence()
        self.wins: dict[str, int] = {"plain": 0, "lookup": 0, "model": 0}
        self.realised = RealisedCosts()
        self.tries = 0  # rounds that tried an arm not run lately
        self._round = 0
        # The model's costs in units of the target's one-token pass measured at the same time: a shared
        # machine's load moves both alike, so the ratio stays current while absolute timings go stale.
        self._model_fixed: float | None = None
        self._model_step: float | None = None
        self._catch_up: float | None = None  # per token the draft model decodes to catch up, the same units
        self._since_model = 0
        self._unmeasured_tries = 0
        self._first_round = False  # the next round is a reply's first
        self._unread: list[int] | None = None  # the prompt the model has yet to read (see prefill)
        self._read_token: float | None = None  # per prompt token the model reads, in units of a one-token pass
        self._reply_tokens: float | None = None  # how long replies run here (a moving average)
        self._reuse = 0.0  # the share of a prompt the target held already (a moving average)
        self._reply_from: int | None = None  # where the current reply began
        self._model_in_reply = False  # whether the model drafted in the current reply
        self._replies_without_model = 0
        self._reply_seen = 0  # how far it has come
        self._pending: _Pending | None = None

    def prefill(self, tokens: Sequence[int]) -> None:
        """A model that follows the text reads the prompt only when it first drafts in the reply: the first
        token never waits for it, and a reply that lookup and plain rounds carry to its end never pays it.
        Until then rounds are priced as if it had read it, and the read is weighed on its own
        (:meth:`_without_read`)."""
        if self._reply_from is not None:  # the previous reply's length, as far as its last round asked
            self._reply_tokens = _ema(self._reply_tokens, float(self._reply_seen - self._reply_from))
            self._replies_without_model = 0 if self._model_in_reply else self._replies_without_model + 1
        self._model_in_reply = False
        self._reply_from = self._reply_seen = len(tokens) + 1
        self._pending = None
        self._first_round = True
        self._unread = None
        if self.model.follows_text:
            self._unread = list(tokens)
        else:
            self.model.prefill(tokens)

    def prompt_reused(self, share: float) -> None:
        self._reuse = _ema(self._reuse, share)

    def _behind(self, tokens: Sequence[int]) -> int:
        """Committed tokens the model would catch up on, beyond a round's usual one or two."""
        if self._unread is not None:
            return max(0, len(tokens) - len(self._unread) - 2)
        return self.model.behind(tokens)

    def lookups(self, tokens: Sequence[int], k: int, *, memory: bool = True) -> list[tuple[int, tuple[int, ...]]]:
        """The distinct lookup proposals (real match length, tokens), the longest n-gram searched first.

        ``memory=False``: the conversation only, not the lookup memory (quick enough to ask every draft step).
        """
        seq = np.asarray(tokens, dtype=np.int64)
        found: list[tuple[int, tuple[int, ...]]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_ngram, len(seq) - 1), 0, -1):
            follow, length = find_match(seq, n, max_length=MAX_MATCH)
            hay = seq
            if follow < 0 and memory and self.memory is not None and n >= MIN_MEMORY_NGRAM:
                follow, length = find_match(seq, n, self.memory, max_length=MAX_MATCH)
                hay = self.memory
            if follow < 0:
                continue
            proposal = tuple(int(t) for t in hay[follow : follow + k])
            if proposal and proposal not in seen:
                seen.add(proposal)
                found.append((length, proposal))
        return found

    def costs(self, request: DraftRequest) -> Costs:
        """This round's cost estimates: the target's from the round-cost model, the model's from its timings."""
        view = request.costs
        n_max = request.k + 2
        factors: dict[str, float] = {}
        if view is not None and view.measured_plain():
            verify, plain, drafted = view.verify_costs(n_max), view.overhead(False), view.overhead(True)
            factors = self.realised.factors(self._round)
        else:  # in units of a one-token pass
            verify, plain, drafted = unmeasured_verify_costs(n_max), 0.0, 0.0
        step = (self._model_step if self._model_step is not None else STEP_GUESS) * verify[1]
        fixed = self._model_fixed * verify[1] if self._model_fixed is not None else step
        catch_up = 0.0  # a model that does not follow the text has nothing to catch up on
        if self.model.follows_text:
            catch_up = self._catch_up * verify[1] if self._catch_up is not None else CATCH_UP_SHARE * step
        return Costs(fixed, step, catch_up, verify, plain, drafted, self._behind(request.tokens), factors)

    def draft(self, request: DraftRequest) -> Draft:
        tokens = request.tokens
        self._reply_seen = len(tokens)
        self._observe(tokens, time.perf_counter())
        k = request.k
        if k <= 0:
            return Draft()
        self._round += 1
        lookups = self.lookups(tokens, k)
        costs = self.costs(request)
        waiting = self._without_read(request, lookups, costs)
        if waiting is not None:  # this round without the model, which has not read the prompt
            best, plan = waiting, None
        else:
            best, plan = self.decide(lookups, k, costs)
        if len(tokens) > (self._reply_from or 0):  # a reply's first round is the model of costs' alone
            tried = self._retry(best, lookups, k, costs)
            if tried is not None:
                best, plan = tried, None
                self.tries += 1
        self.wins[best.label] += 1
        read_before = self._unread is not None
        # The round is timed from here: the choice above costs every arm alike, so it is no arm's.
        started = time.perf_counter()
        out = Draft()
        if best.model:
            self._since_model = 0
            self._model_in_reply = True
            n, keep_going = best.model, None
            if best.rate > 0.0:  # a chosen round (not a probe): the model drafts on while its confidence pays
                n, keep_going = k, self._stopper(tokens, k, costs, plan, lookups)
            self._draft_model(out, request, n, costs.verify[1], keep_going)
            if out.tokens and len(out.tokens) < k:
                self._lookup_after_model(out, request, costs)
        else:
            self._since_model += 1
            _append_lookup(out, best.lookup, best.match)
            out.step_seconds = 0.0 if best.lookup else None
        read_seconds = self.model.read[1] if read_before and self._unread is None else 0.0
        timed = request.costs is not None and request.costs.measured_plain()  # seconds, not units: comparable
        n_model = sum(1 for source in out.sources if source is self.model_source)
        self._pending = _Pending(len(tokens), out.tokens[:], out.sources[:], out.match_lengths[:], out.probs[:],
                                 lookups, arm_of(len(out.tokens), n_model), self._round, started, read_seconds,
                                 costs.predicted(len(out.tokens), n_model) if timed else 0.0)
        return out

    def _retry(self, best: Candidate, lookups: Sequence[tuple[int, tuple[int, ...]]], k: int,
               costs: Costs) -> Candidate | None:
        """A short try of an arm that can draft this round and has not run for :data:`RETRY_EVERY` rounds, in
        place of ``best``; None where none is due (or ``best``'s own arm is, which then runs as chosen).

        The tries keep every arm's realised factor current, so that what a busy machine does to an arm the
        model of costs left out is seen within a bounded number of rounds. A probe or a forced try of the model
        stands, and so does a lookup long enough that a model round would hand over to it. A try of a model
        that has not read the prompt waits until :data:`READ_RETRY_REPLIES` replies went without it.
        """
        if best.rate == 0.0 or (best.lookup and best.match >= MIN_HANDOVER_MATCH):
            return None
        arms = ["plain", "model", "lookup"] if lookups else ["plain", "model"]
        if self._unread is not None and self._replies_without_model < READ_RETRY_REPLIES:
            arms.remove("model")
        for arm in arms:
            last = self.realised.last(arm)
            if self._round - (last if last is not None else 1) < RETRY_EVERY:
                continue
            if arm == best.label:
                return None
            if arm == "plain":
                return Candidate((), 0, 0, 0.0)
            if arm == "lookup":
                return dataclasses.replace(choose(lookups, min(PROBE_DEPTH, k), self.table, costs, None,
                                                  floor=False), rate=0.0)
            return Candidate((), 0, min(PROBE_DEPTH, k), 0.0)
        return None

    def _without_read(self, request: DraftRequest, lookups: Sequence[tuple[int, tuple[int, ...]]],
                      costs: Costs) -> Candidate | None:
        """This round's candidate without the model where the model, which has not read the prompt yet, should
        not read it now; None where it may.

        Rounds are priced as if it had read it; the read itself is a one-off cost that pays only through the
        rounds after it. So it waits in a reply's first round when its read would hold the first token back
        by more than that round would gain (at least a target pass), the next round drafting as a first round
        would; and for as long as what the model would save over the rest of the reply (the best rate with it
        against the best without, per token left: to its token limit, or a usual reply's length here where
        that is shorter), counted again by the share of prompts that come back here, does not cover the read.
        """
        if self._unread is None:
            return None
        per_token = costs.catch_up_token if self._read_token is None else self._read_token * costs.verify[1]
        read = self.model.behind(self._unread) * per_token
        k = request.k
        without = choose(lookups, k, self.table, costs, None)
        with_model = choose(lookups, k, self.table, costs, self.model_source).rate
        gain = 0.0  # what one round the model drafts under its stop plan saves against one without it
        if self._model_fixed is not None:
            tokens, seconds = self._planned_round(costs, self._model_plan(k, costs))
            with_model = max(with_model, tokens / seconds)
            gain = max(0.0, tokens / without.rate - seconds)
        if self._first_round and len(request.tokens) <= len(self._unread) + 1 and read > max(costs.verify[1], gain):
            return without
        left: float | None = request.remaining
        if self._reply_tokens is not None:  # replies end before their limit: a usual one's length bounds it
            left = min(left if left is not None else self._reply_tokens, self._reply_tokens)
        if left is None:
            return None
        saved = left * max(0.0, 1.0 / without.rate - 1.0 / with_model)
        # What the model reads stays in its cache (the context, the prompt cache) for the conversation's next
        # turn and the prompt's repeats: where prompts here have come back (the share the target held), a read
        # serves about one more reply.
        return without if saved * (1.0 + self._reuse) < read else None

    def decide(self, lookups: Sequence[tuple[int, tuple[int, ...]]], k: int, costs: Costs
               ) -> tuple[Candidate, StopPlan | None]:
        """This round's candidate, and the stop plan made for a model round where one was (the round counted).

        The best expected rate wins: :func:`choose` over the lookups and the model
        at fixed lengths, or, once the model's costs are
        measured, the model drafting on under its stop plan (which stops after a
        hesitant draft). A round that would leave the model out drafts with it
        instead (a zero rate: no stop plan) while its costs are unmeasured, for
        :data:`UNMEASURED_TRIES` rounds at the start depth, and as a probe of
        :data:`PROBE_DEPTH` every :data:`PROBE_EVERY` rounds without it, or at once in a reply's
        first round where no lookup is found.
        """
        best = choose(lookups, k, self.table, costs, self.model_source)
        plan: StopPlan | None = None
        if self._model_fixed is not None and not best.model:
            plan = self._model_plan(k, costs)
            tokens, seconds = self._planned_round(costs, plan)
            planned = tokens / seconds
            if planned > best.rate * (1.0 + 1e-9):
                best = Candidate((), 0, k, planned)
        if not best.model:
            probe = min(PROBE_DEPTH, k)
            if self._model_fixed is None and self._unmeasured_tries < UNMEASURED_TRIES:
                self._unmeasured_tries += 1
                best = Candidate((), 0, min(DEFAULT_AUTO_START, k), 0.0)
            elif self._since_model >= PROBE_EVERY or (self._first_round and not best.lookup):
                best = Candidate((), 0, probe, 0.0)
        self._first_round = False
        return best, plan

    @staticmethod
    def _planned_round(costs: Costs, plan: StopPlan) -> tuple[float, float]:
        """The expected tokens and seconds of a round the model drafts under ``plan``."""
        tokens_added, seconds = plan.expected(1.0)
        seconds = (costs.verify[1] + costs.overhead_drafted + seconds) * costs.factors.get("model", 1.0)
        return 1.0 + tokens_added, seconds

    def _model_plan(self, n: int, costs: Costs) -> StopPlan:
        """The stop plan for up to ``n`` model drafts (see :meth:`StopPlan.for_round`)."""
        average = self.table.pooled(self.model_source, 0)
        return StopPlan.for_round(self.table.rates(self.model_source, 0, n), self.confidence, average, costs)

    def _stopper(self, ahead: Sequence[int], n: int, costs: Costs, plan: StopPlan | None = None,
                 lookups: Sequence[tuple[int, tuple[int, ...]]] = ()
                 ) -> Callable[[Sequence[int], Sequence[float]], bool]:
        """Whether the model should draft one more token after ``ahead`` (the committed text) and the drafts so
        far (at most ``n``).

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
        confidence, table, verify = self.confidence, self.table, costs.verify
        catch_up = costs.catch_up_token
        average = self.table.pooled(self.model_source, 0)
        if plan is None:
            plan = self._model_plan(n, costs)
        longest0 = _longest(lookups)
        proposed = [longest0[1][0]] if longest0 is not None else []  # the lookup's next token, as last asked

        def keep_going(tokens: Sequence[int], probs: Sequence[float]) -> bool:
            i = len(probs)
            if i >= n:
                return False
            survive = 1.0
            for j, prob in enumerate(probs):
                survive *= confidence.rate(prob, model_rates[j], average)
            on = plan.gain(i, survive)
            if on <= 0.0:
                return False
            if not tokens:
                return True
            confirmed = proposed == [tokens[-1]]
            found = self.lookups([*ahead, *tokens], n - i, memory=False)
            longest = _longest(found)
            proposed[:] = [longest[1][0]] if longest is not None else []
            if longest is None or not confirmed or longest[0] < MIN_HANDOVER_MATCH:
                return True
            gained, alive = 0.0, survive  # a lookup continuing the drafts instead
            for j, rate in enumerate(table.rates(DraftSource.LOOKUP, match_key(longest[0]), len(longest[1]))):
                alive *= rate
                gained += alive
                if gained - plan.rate * (verify[i + j + 2] - verify[i + 1] + gained * catch_up) > on:
                    return False
            return True

        return keep_going

    def _draft_model(self, out: Draft, request: DraftRequest, n: int, unit: float,
                     keep_going: Callable[[Sequence[int], Sequence[float]], bool] | None = None) -> None:
        """Append up to ``n`` model drafts to ``out``, and time them (in ``unit`` seconds)."""
        if self._unread is not None:
            self.model.prefill(self._unread)
            self._unread = None
            read, seconds = self.model.read
            if read >= MIN_READ:
                self._read_token = _ema(self._read_token, seconds / unit / read)
        ahead = request.tokens
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
        # lookup rounds is paid once and says little about the next round).
        if drafted.sync_seconds is not None:
            self._model_fixed = _ema(self._model_fixed, (drafted.sync_seconds + sample) / unit)
        elif self._model_step is not None:
            # In step, the first draft costs about what a further one does: an estimate that only long
            # catch-ups followed (probes after plain rounds) would otherwise never be corrected.
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
        _append_lookup(out, longest[1][:n], longest[0])

    def _observe(self, tokens: Sequence[int], now: float) -> None:
        """Score the previous round's drafts, and every lookup proposal, against what the target committed; time
        its arm's round (from its draft to ``now``, the model's prompt read left out)."""
        pending, self._pending = self._pending, None
        if pending is None or len(tokens) <= pending.base:
            return
        new = tokens[pending.base :]
        self.realised.record(pending.arm, pending.number, pending.predicted,
                             now - pending.started - pending.read_seconds)
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


def _append_lookup(out: Draft, tokens: Sequence[int], match: int) -> None:
    """Append lookup drafts to ``out``: one-hot, from a match of ``match`` tokens."""
    out.tokens += tokens
    out.q += [Distribution.one_hot(t) for t in tokens]
    out.probs += [1.0] * len(tokens)
    out.sources += [DraftSource.LOOKUP] * len(tokens)
    out.match_lengths += [match] * len(tokens)
    out.top += [((t, 1.0),) for t in tokens]


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


def _ema(old: float | None, new: float, decay: float = TIMING_DECAY) -> float:
    return new if old is None else decay * old + (1 - decay) * new
