"""From measured rounds to predicted tokens per second, the best depth, and why a candidate loses.

A round of depth k yields ``expected_tokens_curve(acceptance, k)`` tokens and takes
``draft(L) + verify(L + 1) + overhead`` seconds, L being the tokens the drafter
actually proposes at depth k (n-gram lookup often proposes fewer, or none). The
target's part is the engine's round-cost model
(:class:`~specchat.core.engine.costs.RoundCosts`), fitted to every calibration
round (:meth:`~specchat.core.engine.costs.RoundCosts.fitted`); the drafter's part
and its acceptance come from its own rounds. Plain means stand in for running
averages: what a reply costs is the sum of its rounds, slow ones included (a
median would leave out the slow rounds a busy machine has, and predict a speed
nobody gets).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specchat.core.advise.calibrate import Measurement, RoundSample
from specchat.core.engine.costs import RoundCosts
from specchat.core.engine.depth import AdaptiveDepth, expected_tokens_curve

LOW_ACCEPTANCE = 0.5  # below this a losing candidate's problem is that it guesses badly
HIGH_COST = 0.3  # a draft step above this share of a target pass is what makes it lose
ACCEPTANCE_MARGIN = 0.05  # less acceptance than the winner's by more than this is why a candidate is behind


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


@dataclass(frozen=True)
class DraftCosts:
    """A drafter's measured costs (seconds) and its per-position acceptance."""

    sync: float
    step: float
    sample: float
    overhead: float
    acceptance: tuple[float, ...]  # position i (from 1): accepted given every earlier one was
    proposed: tuple[float, ...]  # depth k (from 1): tokens the drafter proposes on average

    def draft_seconds(self, proposed: float) -> float:
        if proposed <= 0:
            return self.sync  # the attempt that found nothing to propose
        return self.sync + proposed * self.sample + max(proposed - 1.0, 0.0) * self.step

    def per_token(self) -> float:
        """Seconds per drafted token once the round has begun (a step and a draw; the catch-up without steps)."""
        return (self.step if self.step > 0 else self.sync) + self.sample


def acceptance_curve(rounds: Sequence[RoundSample], max_depth: int) -> tuple[float, ...]:
    """Conditional acceptance of draft positions 1..max_depth over the drafted rounds.

    A round of depth d reaches position i <= d when the i - 1 before it were accepted;
    a position the drafter did not fill counts as rejected. Positions no round reached
    reuse the last measured value (0 when none was).
    """
    out: list[float] = []
    for i in range(1, max_depth + 1):
        reached = [r for r in rounds if r.depth >= i and r.accepted >= i - 1]
        if reached:
            out.append(sum(1 for r in reached if r.accepted >= i) / len(reached))
        else:
            out.append(out[-1] if out else 0.0)
    return tuple(out)


def proposal_lengths(rounds: Sequence[RoundSample], max_depth: int) -> tuple[float, ...]:
    """Tokens proposed at depth k: the mean of ``min(drafted, k)`` over rounds asked for k or more."""
    out: list[float] = []
    for k in range(1, max_depth + 1):
        deep = [min(r.drafted, k) for r in rounds if r.depth >= k]
        out.append(statistics.fmean(deep) if deep else float(k))
    return tuple(out)


def draft_costs(rounds: Sequence[RoundSample], max_depth: int) -> DraftCosts:
    drafted = [r for r in rounds if r.depth > 0]
    # A model drafter's step is a decode after the first, so only rounds of two or more drafts time one.
    step = _mean([r.step for r in drafted if r.drafted > 1 or r.sync is None])
    sync = _mean([r.sync for r in drafted])
    if step is None:
        step = 0.0
    return DraftCosts(
        sync=sync if sync is not None else step,
        step=step,
        sample=_mean([r.sample for r in drafted if r.drafted > 0]) or 0.0,
        overhead=_mean([r.overhead for r in drafted]) or 0.0,
        acceptance=acceptance_curve(drafted, max_depth),
        proposed=proposal_lengths(drafted, max_depth),
    )


@dataclass(frozen=True)
class Prediction:
    """Predicted rates at each depth (index 0 is plain decoding), the best fixed depth and auto's."""

    rates: tuple[float, ...]
    best_depth: int
    auto_depth: int
    acceptance: float  # share of drafted tokens accepted at the best depth (at the deepest when none pays)
    cost_ratio: float  # a drafted token's cost over a one-token target pass
    curve: tuple[float, ...]

    @property
    def plain_rate(self) -> float:
        return self.rates[0]

    @property
    def best_rate(self) -> float:
        return self.rates[self.best_depth]

    @property
    def speedup(self) -> float:
        return self.best_rate / self.plain_rate if self.plain_rate > 0 else 0.0

    @property
    def auto_speedup(self) -> float:
        return self.rates[self.auto_depth] / self.plain_rate if self.plain_rate > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "best_depth": self.best_depth,
            "speedup": round(self.speedup, 3),
            "auto_depth": self.auto_depth,
            "auto_speedup": round(self.auto_speedup, 3),
            "tokens_per_second": round(self.best_rate, 2),
            "plain_tokens_per_second": round(self.plain_rate, 2),
            "acceptance": round(self.acceptance, 4),
            "draft_cost": round(self.cost_ratio, 4),
            "acceptance_by_position": [round(a, 4) for a in self.curve],
            "tokens_per_second_by_depth": [round(r, 2) for r in self.rates],
        }


def rate_at(target: RoundCosts, draft: DraftCosts, k: int) -> float:
    """Predicted tokens per second at depth k (k = 0: plain decoding)."""
    if k == 0:
        return target.plain_rate()
    proposed = draft.proposed[min(k, len(draft.proposed)) - 1]
    # Checking a batch never costs less than a plain round, whatever the drafter's own overhead.
    checked = max(target.verify_cost(proposed + 1) + draft.overhead, 1.0 / target.plain_rate())
    seconds = draft.draft_seconds(proposed) + checked
    return expected_tokens_curve(draft.acceptance, k) / seconds


def auto_depth(target_rounds: Sequence[RoundSample], rounds: Sequence[RoundSample], max_depth: int) -> int:
    """The depth the adaptive controller settles on after seeing these rounds (plain ones first)."""
    controller = AdaptiveDepth(max_depth=max_depth)
    for r in [*target_rounds, *rounds]:
        controller.observe(r.drafted, r.accepted, r.step, r.verify, r.overhead, r.sync, r.sample)
    return max(range(max_depth + 1), key=controller.predicted_rate)


def predict(plain: Measurement, measured: Measurement, max_depth: int, target: RoundCosts | None = None) -> Prediction:
    """The prediction for one drafter. ``target`` is the target's costs fitted over every drafter's rounds
    (the target is the same whatever drafts for it, and so candidates are ranked on one scale); by default
    they are fitted to ``plain`` and ``measured`` alone."""
    if target is None:
        target = RoundCosts.fitted([*plain.rounds, *measured.rounds])
    draft = draft_costs(measured.rounds, max_depth)
    rates = tuple(rate_at(target, draft, k) for k in range(max_depth + 1))
    best = max(range(max_depth + 1), key=lambda k: rates[k])
    auto = auto_depth(plain.rounds, measured.rounds, max_depth)
    shown = best if best > 0 else max_depth
    accepted = (expected_tokens_curve(draft.acceptance, shown) - 1.0) / shown
    return Prediction(rates, best, auto, accepted, draft.per_token() / target.verify_cost(1), draft.acceptance)


def losing_reason(prediction: Prediction, winner: Prediction | None) -> str:
    """Why a measured candidate is not the one to use, in plain words ('' for the winner).

    One that does not beat plain decoding is told what stops it; one that does, but less than
    the winner, is told where it falls short of the winner (acceptance or cost).
    """
    p = prediction
    if winner is p:
        return ""
    if winner is None or p.speedup <= 1.0:
        if p.acceptance < LOW_ACCEPTANCE:
            return f"accepts only {p.acceptance:.0%} of drafts"
        if p.cost_ratio >= HIGH_COST:
            return f"guesses well but costs {p.cost_ratio:.0%} of a target pass"
        return f"no faster than plain decoding here ({p.speedup:.2f}x)"
    behind = f"{p.speedup:.2f}x against {winner.speedup:.2f}x"
    if p.acceptance < winner.acceptance - ACCEPTANCE_MARGIN:
        return f"accepts {p.acceptance:.0%} of drafts, the best {winner.acceptance:.0%} ({behind})"
    if p.cost_ratio >= HIGH_COST and p.cost_ratio > winner.cost_ratio:
        return f"guesses well but costs {p.cost_ratio:.0%} of a target pass ({behind})"
    return f"behind the best ({behind})"
