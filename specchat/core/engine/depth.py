"""How many tokens to draft each round: a fixed depth, or an adaptive controller.

The adaptive controller prices a round of depth k with the round-cost model
(:class:`~specchat.core.engine.costs.RoundCosts`: the draft's steps, the
target's verify pass of k + 1 tokens, the round's overhead), expects it to
yield ``1 + a1 + a1*a2 + ... + a1*...*ak`` tokens, where ai is
the acceptance of draft position i given that every earlier one was accepted
(the acceptance curve), and picks the k with the highest expected tokens per
second. k = 0 is plain decoding, so a poor draft makes the controller back off
to it; it then probes a small depth now and then to notice when the draft
starts guessing well again.

The curve is its level moved by its shape. The level is the pooled acceptance
over the last few rounds (a fast decay); when recent rounds fit a markedly
higher or lower rate than the level says (a CUSUM test), the level forgets
most of its counts, so a change of character, say from copying text to
writing new, moves the whole curve within a few rounds. The shape, how each
position's rate compares with the pooled one (in log-odds), is a property of
the pair, learned from longer-lived per-position counts. A deep position is
reached only in rounds whose earlier drafts all held, so its counts are few:
each position's estimate leans on the one before it (capped by the shallower
positions pooled; the first leans on the pooled rate) by as many pseudo-rounds
as it takes to expect one rejection, so a position seen twice and accepted
twice does not read 100%.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

from specchat.core.engine.costs import RoundCosts
from specchat.core.types import DEFAULT_DEPTH, MAX_DEPTH, SpecchatError

DEFAULT_AUTO_START = 4
"""The depth auto starts at, before the cost model has the acceptance evidence to choose."""
WARMUP_ROUNDS = 3
"""Drafted rounds run at the start depth before the cost model chooses: it needs acceptance evidence."""
PRIOR_REJECTIONS = 1.0
"""A position's prior weighs as many rounds as would hold this many rejections at the prior's rate."""
SHAPE_DECAY = 0.99
"""Per drafted round, how much of the per-position counts is kept (a memory of about 100 rounds)."""
CHANGE_ODDS = 4.0
"""The change detector watches for the odds of a rejection having grown or shrunk by this factor."""
CHANGE_THRESHOLD = 4.0
"""Log-likelihood ratio (summed over recent rounds) in favour of such a change that makes the level start afresh."""
CHANGE_KEEP = 0.2
"""The share of the level's counts kept when a change of character is detected."""
PROBE_SOONER = 4
"""At plain decoding, probe this many times as often while the long-run acceptance says drafting pays."""


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per round at depth k with i.i.d. acceptance probability alpha."""
    if k == 0:
        return 1.0
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_curve(accept: Sequence[float], k: int) -> float:
    """Expected tokens per round at depth k when draft position i (from 1) is accepted with
    probability ``accept[i - 1]`` given that every earlier position was (positions past the
    curve's end reuse its last value): 1 + sum over i <= k of the product of accept[:i].
    """
    if k == 0 or not accept:
        return 1.0
    total, alive = 1.0, 1.0
    for i in range(k):
        alive *= min(1.0, max(0.0, accept[min(i, len(accept) - 1)]))
        total += alive
    return total


def logit(p: float) -> float:
    """The log-odds of probability ``p`` (kept a millionth away from 0 and 1)."""
    p = min(max(p, 1e-6), 1.0 - 1e-6)
    return math.log(p / (1.0 - p))


def sigmoid(x: float) -> float:
    """The probability whose log-odds are ``x``."""
    return 1.0 / (1.0 + math.exp(-x))


class DepthControl:
    """A thread-safe knob: a fixed depth, or None for auto. The GUI moves it mid-reply."""

    def __init__(self, depth: int | None = DEFAULT_DEPTH) -> None:
        self._lock = threading.Lock()
        self._requested = depth

    def set(self, depth: int | None) -> None:
        if depth is not None and not 0 <= depth <= MAX_DEPTH:
            raise SpecchatError(f"depth must be 0-{MAX_DEPTH} or auto, got {depth}")
        with self._lock:
            self._requested = depth

    @property
    def requested(self) -> int | None:
        with self._lock:
            return self._requested


class AdaptiveDepth:
    """Chooses k per round from measured acceptance per draft position and the round-cost model.

    The costs (:class:`~specchat.core.engine.costs.RoundCosts`, :attr:`costs`)
    learn from the same rounds: the target's verify cost by batch size, the
    round's overhead and the draft's steps, all kept at a reference load and
    scaled by the machine's load now. The choice of depth depends on the
    costs' ratios only.
    """

    def __init__(
        self,
        *,
        decay: float = 0.85,
        probe_every: int = 12,
        start: int = DEFAULT_AUTO_START,
        max_depth: int = MAX_DEPTH,
        positional: bool = True,
        shape_decay: float = SHAPE_DECAY,
        prior_rejections: float = PRIOR_REJECTIONS,
        change_threshold: float = CHANGE_THRESHOLD,
        costs: RoundCosts | None = None,
    ) -> None:
        """``positional=False`` gives the older model: one acceptance rate for every draft position, no change test."""
        self.decay = decay
        self.probe_every = probe_every
        self.start = start
        self.max_depth = max_depth
        self.positional = positional
        self.shape_decay = shape_decay
        self.prior_rejections = prior_rejections
        self.change_threshold = change_threshold
        self.costs = costs if costs is not None else RoundCosts(decay)
        # Acceptance as a truncated-geometric count, with a mild prior of 0.6.
        self._acc = 3.0
        self._rej = 2.0
        # Per draft position (index 0 = position 1): decayed rounds that reached it, and that accepted it.
        self._reached = [0.0] * max(MAX_DEPTH, max_depth)
        self._accepted = [0.0] * max(MAX_DEPTH, max_depth)
        self._curve: list[float] | None = None  # the acceptance curve, None = stale
        self._long_curve: list[float] = []  # the per-position estimates at the long-run level
        self._evidence = {False: 0.0, True: 0.0}  # CUSUM log-likelihood ratios: acceptance fell, rose
        self.changes = 0  # how many changes of character were detected
        self._drafted_rounds = 0
        self._rounds_at_zero = 0

    @property
    def alpha(self) -> float:
        """The recent pooled acceptance rate (the curve's level; the whole model with ``positional=False``)."""
        return self._acc / (self._acc + self._rej)

    def observe(
        self,
        n_drafted: int,
        n_accepted: int,
        step_seconds: float | None,
        verify_seconds: float | None,
        overhead_seconds: float | None = None,
        sync_seconds: float | None = None,
        sample_seconds: float | None = None,
    ) -> None:
        """Record one finished round: its acceptance here, its timings in :attr:`costs`.

        ``step_seconds``: per draft decode after the first; ``sync_seconds``: the
        draft's catch-up at the start of the round; ``sample_seconds``: per
        drafted token, its distribution and draw; ``overhead_seconds``: the
        round's time outside drafting and verifying. ``verify_seconds`` None: the round's
        timings say nothing of the costs (its verify pass ran on a thread count the tuner was trying),
        only its acceptance counts.
        """
        if verify_seconds is not None:
            self.costs.observe(n_drafted, verify_seconds, overhead_seconds, step_seconds, sync_seconds, sample_seconds)
        if n_drafted > 0:
            if self.positional and self._drafted_rounds >= WARMUP_ROUNDS and self._changed(n_drafted, n_accepted):
                self._acc *= CHANGE_KEEP
                self._rej *= CHANGE_KEEP
            self._observe_positions(n_drafted, n_accepted)
            self._acc = self.decay * self._acc + n_accepted
            self._rej = self.decay * self._rej + (1.0 if n_accepted < n_drafted else 0.0)
            self._drafted_rounds += 1
        self._curve = None

    def _observe_positions(self, n_drafted: int, n_accepted: int) -> None:
        """Count the round per position: positions 1..min(accepted + 1, drafted) reached, 1..accepted accepted."""
        n_drafted = min(n_drafted, len(self._reached))
        n_accepted = min(n_accepted, n_drafted)
        reached = min(n_accepted + 1, n_drafted)
        keep = self.shape_decay
        self._reached = [keep * r + (1.0 if i < reached else 0.0) for i, r in enumerate(self._reached)]
        self._accepted = [keep * a + (1.0 if i < n_accepted else 0.0) for i, a in enumerate(self._accepted)]

    def _changed(self, n_drafted: int, n_accepted: int) -> bool:
        """Whether recent rounds say the conversation changed character: the draft now guesses markedly
        better or worse than the level's counts hold.

        A CUSUM test per direction: each round adds the log-likelihood ratio of
        its outcome under the level with the odds of a rejection multiplied (or
        divided) by CHANGE_ODDS against the level as it is; the sum, floored at
        zero, passing CHANGE_THRESHOLD is a change. One unlucky round cannot
        pass it alone; two or three telling ones in a row do.
        """
        a0 = min(max(self.alpha, 0.01), 0.99)
        odds = (1.0 - a0) / a0
        for rose in (False, True):
            a1 = 1.0 / (1.0 + (odds / CHANGE_ODDS if rose else odds * CHANGE_ODDS))
            llr = n_accepted * math.log(a1 / a0)
            if n_accepted < n_drafted:
                llr += math.log((1.0 - a1) / (1.0 - a0))
            self._evidence[rose] = max(0.0, self._evidence[rose] + llr)
        if max(self._evidence.values()) < self.change_threshold:
            return False
        self._evidence = {False: 0.0, True: 0.0}
        self.changes += 1
        return True

    def acceptance_curve(self) -> list[float]:
        """Estimated acceptance of each draft position (1 to max_depth) given that the earlier ones were accepted.

        With ``positional=False`` every position reads the pooled rate.
        """
        if not self.positional:
            return [self.alpha] * self.max_depth
        if self._curve is None:
            self._curve = self._compute_curve()
        return self._curve[: self.max_depth]

    def _compute_curve(self) -> list[float]:
        """The recent pooled rate moved per position by the long-run shape (in log-odds, so it stays in 0-1)."""
        # Long-run pooled rate, with the same mild prior of 0.6 as the recent one.
        base = (sum(self._accepted) + 3.0) / (sum(self._reached) + 5.0)
        level = logit(self.alpha)
        curve: list[float] = []
        long_curve: list[float] = []
        shallower_accepted = shallower_reached = 0.0
        previous = base
        for reached, accepted in zip(self._reached, self._accepted, strict=True):
            # The prior: the previous position's estimate, capped by every shallower position pooled. The
            # cap matters: the few rounds that reach position i reach all positions before it too, and a
            # chain of estimates alone would count them again at every step and drift upward.
            weight = self.prior_rejections / max(1.0 - base, 0.01)
            pooled = (shallower_accepted + weight * base) / (shallower_reached + weight)
            prior = min(previous, pooled)
            weight = self.prior_rejections / max(1.0 - prior, 0.01)
            previous = (accepted + weight * prior) / (reached + weight)
            long_curve.append(previous)
            shape = logit(previous) - logit(base)  # this position against the pooled rate, in log-odds
            curve.append(sigmoid(level + shape))
            shallower_accepted += accepted
            shallower_reached += reached
        self._long_curve = long_curve
        return curve

    def predicted_rate(self, k: int) -> float:
        """Expected tokens per second at depth k under the current estimates."""
        if self.positional:
            tokens = expected_tokens_curve(self.acceptance_curve(), k)
        else:
            tokens = expected_tokens(self.alpha, k)
        return tokens / self.costs.round_cost(k)

    def choose(self, max_depth: int | None = None) -> int:
        """This round's depth: 0 until a plain round is timed, the start depth while warming up, then the
        depth with the highest predicted rate (with a short probe now and then while that is plain decoding)."""
        limit = self.max_depth if max_depth is None else max_depth
        if not self.costs.measured_plain():
            return 0  # the first round measures plain decoding's cost
        if self._drafted_rounds < WARMUP_ROUNDS:
            return min(self.start, limit)
        best = max(range(limit + 1), key=self.predicted_rate)
        if best == 0:
            self._rounds_at_zero += 1
            every = self.probe_every
            if self.positional and self._long_run_pays(limit):
                every = max(1, self.probe_every // PROBE_SOONER)
            if self._rounds_at_zero % every == 0:
                return min(2, limit)
        return best

    def _long_run_pays(self, limit: int) -> bool:
        """Whether drafting would beat plain decoding at the long-run acceptance (not the recent level).

        After a bad patch the recent level can send the controller to plain
        decoding, where it learns nothing more about acceptance; if the draft
        usually guesses well enough to pay, it is worth probing sooner.
        """
        self.acceptance_curve()
        plain = self.predicted_rate(0)
        return any(
            expected_tokens_curve(self._long_curve, k) / self.costs.round_cost(k) > plain for k in range(1, limit + 1)
        )

    def predicted_best_rate(self) -> float:
        """The highest :meth:`predicted_rate` over every depth."""
        return max(self.predicted_rate(k) for k in range(self.max_depth + 1))
