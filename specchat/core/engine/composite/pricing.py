"""Pricing: what a round costs and yields, and the choice of the round with the best expected rate.

:class:`Costs` holds one round's cost estimates (the target's verify pass by
batch size and its overhead, the model's draft steps and catch-up, and the
realised factor of each arm). :func:`choose` prices every candidate (the model
drafting 1..k tokens, each lookup proposal cut at each length) as expected
tokens over expected seconds and keeps the best; :func:`lookup_tail` prices a
lookup appended after the model's drafts; :class:`StopPlan` values drafting one
more model token given how sure the drafts so far were. Pure functions of
their arguments: the composite's state comes in through the acceptance tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specchat.core.engine.composite import tuning
from specchat.core.engine.composite.acceptance import AcceptanceTable, Confidence, match_key
from specchat.core.engine.depth import logit
from specchat.core.engine.lookup import Found
from specchat.core.types import DraftSource


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
    """One way to draft a round: ``lookup`` tokens (from a match of ``match`` tokens in ``origin``, "" for the
    conversation) or ``model`` model tokens."""

    lookup: tuple[int, ...]
    match: int
    model: int
    rate: float  # expected tokens per second
    origin: str = ""

    @property
    def label(self) -> str:
        return arm_of(len(self.lookup), self.model)


def origin_of(lookup: Found | tuple[int, tuple[int, ...]]) -> str:
    """The text a lookup proposal came from ("" for the conversation, and for a bare (match, tokens) pair)."""
    return getattr(lookup, "origin", "")


def choose(
    lookups: Sequence[Found | tuple[int, tuple[int, ...]]],
    k: int,
    table: AcceptanceTable,
    costs: Costs,
    model_source: DraftSource | None,
    *,
    floor: bool = True,
) -> Candidate:
    """The candidate with the highest expected tokens per second (ties: the earlier, shorter one).

    ``lookups``: (match length, proposal[, origin]) proposals, each priced by its origin's own acceptance;
    ``model_source``: None when no model can draft;
    ``floor=False``: a drafting candidate even where a plain round is expected to be faster.
    A deterministic function of its arguments.
    """
    best = Candidate((), 0, 0, 1.0 / costs.sat_out(0, 1.0) if floor else -1.0)

    def consider(lookup: tuple[int, ...], match: int, model: int, expected: float, origin: str = "") -> None:
        nonlocal best
        n = len(lookup) + model
        seconds = costs.round(n, model) if model else costs.sat_out(n, expected)
        rate = expected / seconds
        if rate > best.rate * (1.0 + 1e-9):
            best = Candidate(lookup, match, model, rate, origin)

    if model_source is not None:
        expected, survive = 1.0, 1.0
        for j, rate in enumerate(table.rates(model_source, 0, k)):
            survive *= rate
            expected += survive
            consider((), 0, j + 1, expected)
    for found in lookups:
        match, proposal, origin = found[0], found[1], origin_of(found)
        expected, survive = 1.0, 1.0
        rates = table.rates(DraftSource.LOOKUP, match_key(match), min(len(proposal), k), origin)
        for i in range(len(rates)):
            survive *= rates[i]
            expected += survive
            consider(proposal[: i + 1], match, 0, expected, origin)
    return best


def lookup_tail(
    model_rates: Sequence[float],
    lookup: Found | tuple[int, tuple[int, ...]] | None,
    k: int,
    table: AcceptanceTable,
    costs: Costs,
) -> int:
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
    match, proposal = lookup[0], lookup[1]
    rates = table.rates(DraftSource.LOOKUP, match_key(match), min(len(proposal), k - n_model), origin_of(lookup))
    before = expected
    for i, rate in enumerate(rates):
        survive *= rate
        expected += survive
        # The tail's tokens are committed without the draft model decoding them: it catches up on them later.
        round_rate = expected / (costs.round(n_model + i + 1, n_model) + (expected - before) * costs.catch_up_token)
        if round_rate > best_rate * (1.0 + 1e-9):
            best_n, best_rate = i + 1, round_rate
    return best_n


class _Survival:
    """A round's survival after one more model draft, per point of :data:`tuning.STOP_GRID` (the survival before
    it) and confidence bucket, with where each falls on the grid: interpolating there (:meth:`at`) is
    ``np.interp``'s (to the bit below the grid's last point, within a rounding at it), its search done once for
    every plan of the round."""

    def __init__(self, points: np.ndarray) -> None:
        grid = tuning.STOP_GRID
        self.points = points
        self._low = np.clip(np.searchsorted(grid, points, side="right") - 1, 0, len(grid) - 2)
        self._high = self._low + 1
        self._share = (points - grid[self._low]) / (grid[self._high] - grid[self._low])

    @classmethod
    def of(cls, position_rate: float, shifts: np.ndarray) -> _Survival:
        """After a draft at a position of acceptance ``position_rate``, each bucket's log-odds ``shifts`` apart."""
        accept = 1.0 / (1.0 + np.exp(-(logit(position_rate) + shifts)))
        return cls(tuning.STOP_GRID[:, None] * accept[None, :])

    def at(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per grid point) interpolated at these points."""
        low: np.ndarray = values[self._low]
        interpolated: np.ndarray = low + self._share * (values[self._high] - low)
        return interpolated


class StopPlan:
    """When a model drafting a round should stop: its drafts' confidence is seen one at a time.

    Drafting on is valued as tokens gained less ``rate`` times the seconds spent
    (the round's rate, found by re-planning at the rate the plan itself
    achieves: the ratio of expectations is what a long run of rounds gets),
    with the option to stop after any later draft. A fixed-depth estimate at
    the average acceptance misses that option: a pair whose sure drafts are
    nearly always right and whose hesitant ones often wrong drafts deep
    when its drafts are sure, and stops at the first hesitant one.
    ``gains[j]`` holds, over :data:`tuning.STOP_GRID`, the value of drafting the
    ``j+1``-th token when the round survives ``j`` drafts with that probability.
    """

    def __init__(
        self,
        survivals: Sequence[_Survival],
        weights: np.ndarray,
        step_costs: Sequence[float],
        rate: float,
    ) -> None:
        self.rate = rate
        self.gains: list[np.ndarray] = []
        self._tokens = np.zeros_like(tuning.STOP_GRID)  # expected tokens drafting on adds under the plan
        self._seconds = np.zeros_like(tuning.STOP_GRID)
        value = np.zeros_like(tuning.STOP_GRID)
        for j in range(len(step_costs) - 1, -1, -1):
            after = survivals[j]
            gain = (after.points + after.at(value)) @ weights - rate * step_costs[j]
            go = gain > 0.0
            tokens = (after.points + after.at(self._tokens)) @ weights
            seconds = step_costs[j] + after.at(self._seconds) @ weights
            self._tokens = np.where(go | (j == 0), tokens, 0.0)
            self._seconds = np.where(go | (j == 0), seconds, 0.0)
            value = np.maximum(gain, 0.0)
            self.gains.append(gain)
        self.gains.reverse()

    def gain(self, drafted: int, survive: float) -> float:
        """The value of drafting one more after ``drafted`` drafts the round survives with probability ``survive``."""
        if drafted >= len(self.gains):
            return 0.0
        return float(np.interp(survive, tuning.STOP_GRID, self.gains[drafted]))

    def expected(self, survive: float) -> tuple[float, float]:
        """Tokens and seconds the model adds to a round under the plan, from its start (it drafts at least one)."""
        return (
            float(np.interp(survive, tuning.STOP_GRID, self._tokens)),
            float(np.interp(survive, tuning.STOP_GRID, self._seconds)),
        )

    @staticmethod
    def step_costs(costs: Costs, n: int) -> list[float]:
        """What each of ``n`` model drafts adds to a round: its draft step and its token's share of the verify."""
        verify = costs.verify
        return [(costs.model(1) if j == 0 else costs.model_step) + verify[j + 2] - verify[j + 1] for j in range(n)]

    @classmethod
    def for_round(
        cls,
        position_rates: Sequence[float],
        confidence: Confidence,
        average: float,
        costs: Costs,
        iterations: int = tuning.PLAN_ITERATIONS,
    ) -> StopPlan:
        """The plan for a round of up to ``len(position_rates)`` model drafts."""
        shifts, weights = confidence.shifts(average)
        step_costs = cls.step_costs(costs, len(position_rates))
        base = costs.verify[1] + costs.overhead_drafted
        rate = 1.0 / base  # the target's own token
        # Alike each plan, and each position of the same rate (a draft model's positions share its pooled rate).
        of_rate: dict[float, _Survival] = {}
        for position_rate in position_rates:
            if position_rate not in of_rate:
                of_rate[position_rate] = _Survival.of(position_rate, shifts)
        survivals = [of_rate[position_rate] for position_rate in position_rates]
        plan = cls(survivals, weights, step_costs, rate)
        for _ in range(iterations):
            tokens, seconds = plan.expected(1.0)
            rate = max(rate, (1.0 + tokens) / (base + seconds))
            plan = cls(survivals, weights, step_costs, rate)
        return plan
