"""How many tokens to draft each round: a fixed depth, or an adaptive controller.

The adaptive controller models a round of depth k as taking
``draft_sync + k * draft_sample + (k - 1) * draft_step + verify(k + 1) + overhead``
seconds and yielding ``1 + a1 + a1*a2 + ... + a1*...*ak`` tokens, where ai is
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

import numpy as np

from specchat.core.types import DEFAULT_DEPTH, MAX_DEPTH, SpecchatError

DEFAULT_AUTO_START = 4
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
VERIFY_TRUSTED = 8
"""Rounds of one batch size after which its verify cost counts fully in the cost line."""
PLAIN_TRUSTED = 3
"""One-token passes measured after which plain decoding's cost is taken as measured rather than from the line."""
PROBE_SOONER = 4
"""At plain decoding, probe this many times as often while the long-run acceptance says drafting pays."""
LOAD_RATE = 0.5
"""Weight of one round's timing (in log) in the machine's load estimate, which scales every cost."""
LOAD_CLIP = 4.0
"""One round moves the load estimate as if it had been at most this many times slower (or faster) than expected."""
SHAPE_RATE = 0.1
"""Weight of one round in a batch size's verify cost at the reference load (a moving average)."""


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
    """Chooses k per round from measured acceptance per draft position, draft step cost and verify cost.

    Verify cost is kept per batch size (k + 1 tokens) and smoothed with a
    least-squares line over the measured sizes (see :meth:`verify_cost`); on
    a GPU it is nearly flat, on a CPU it grows with the batch, and the
    controller adapts to either.
    The per-round overhead (sampling, detokenizing, bookkeeping: everything
    in a round that is neither a draft step nor the verify pass) is measured
    separately for plain and drafted rounds; it is what makes a short round
    dearer per token than the two model passes alone say.

    On a shared machine every cost moves with the load, and a round measures
    one batch size only: plain rounds re-measure the one-token pass, drafted
    rounds their own sizes. Costs kept apart go stale apart: a one-token pass
    timed under load beside batches timed at a quiet moment priced every
    extra token of a batch at nothing (the batch floor was the one-token
    pass), and lookups of 16 tokens at 5% acceptance beat plain decoding. So
    every cost is kept at a reference load (a slow moving average,
    :data:`SHAPE_RATE`) and multiplied by the current load, which every
    round's verify pass moves (:data:`LOAD_RATE`, in log) by how much slower
    or faster it was than its size's cost at the reference load says: what
    one kind of round measures moves the costs of every other kind with it.
    The choice of depth depends on the costs' ratios only; the load keeps
    them measured at one time.
    """

    def __init__(self, *, decay: float = 0.85, probe_every: int = 12, start: int = DEFAULT_AUTO_START,
                 max_depth: int = MAX_DEPTH, positional: bool = True, shape_decay: float = SHAPE_DECAY,
                 prior_rejections: float = PRIOR_REJECTIONS, change_threshold: float = CHANGE_THRESHOLD) -> None:
        """``positional=False`` gives the older model: one acceptance rate for every draft position, no change test."""
        self.decay = decay
        self.probe_every = probe_every
        self.start = start
        self.max_depth = max_depth
        self.positional = positional
        self.shape_decay = shape_decay
        self.prior_rejections = prior_rejections
        self.change_threshold = change_threshold
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
        self._draft_step: float | None = None  # seconds per draft decode after the first
        self._draft_sample: float | None = None  # seconds per drafted token for its distribution and draw
        self._draft_sync: float | None = None  # seconds for the draft's per-round catch-up (first token)
        self._drafted_rounds = 0
        self._verify: dict[int, float] = {}  # batch size -> seconds
        self._verify_count: dict[int, int] = {}  # batch size -> rounds measured
        self._overhead: dict[bool, float] = {}  # drafted round? -> seconds outside the model passes
        self._line: tuple[float, float] | None = None  # verify-cost fit (slope, intercept), None = stale
        self._rounds_at_zero = 0
        self._load = 1.0  # the machine's load now: the costs above are kept at load 1 and multiplied by it

    @property
    def alpha(self) -> float:
        """The recent pooled acceptance rate (the curve's level; the whole model with ``positional=False``)."""
        return self._acc / (self._acc + self._rej)

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else self.decay * old + (1 - self.decay) * new

    def observe(self, n_drafted: int, n_accepted: int, step_seconds: float | None, verify_seconds: float,
                overhead_seconds: float | None = None, sync_seconds: float | None = None,
                sample_seconds: float | None = None) -> None:
        """Record one finished round.

        ``step_seconds``: per draft decode after the first; ``sync_seconds``: the
        draft's catch-up at the start of the round; ``sample_seconds``: per
        drafted token, its distribution and draw; ``overhead_seconds``: the
        round's time outside drafting and verifying.
        """
        n = n_drafted + 1
        self._track_load(n, verify_seconds)
        load = self._load
        if overhead_seconds is not None:
            key = n_drafted > 0
            self._overhead[key] = self._ema(self._overhead.get(key), max(0.0, overhead_seconds) / load)
        if n_drafted > 0:
            if self.positional and self._drafted_rounds >= WARMUP_ROUNDS and self._changed(n_drafted, n_accepted):
                self._acc *= CHANGE_KEEP
                self._rej *= CHANGE_KEEP
            self._observe_positions(n_drafted, n_accepted)
            self._acc = self.decay * self._acc + n_accepted
            self._rej = self.decay * self._rej + (1.0 if n_accepted < n_drafted else 0.0)
            self._drafted_rounds += 1
            if step_seconds is not None:
                self._draft_step = self._ema(self._draft_step, step_seconds / load)
            if sync_seconds is not None:
                self._draft_sync = self._ema(self._draft_sync, sync_seconds / load)
            if sample_seconds is not None:
                self._draft_sample = self._ema(self._draft_sample, sample_seconds / load)
        share, old = verify_seconds / load, self._verify.get(n)
        self._verify[n] = share if old is None else old + SHAPE_RATE * (share - old)
        self._verify_count[n] = self._verify_count.get(n, 0) + 1
        self._line = None
        self._curve = None

    def _track_load(self, n: int, seconds: float) -> None:
        """Move the load by how much a verify of ``n`` tokens taking ``seconds`` was slower than its share says.

        A size never measured says nothing yet. The size's own cost at the reference load moves too, but
        slower (:data:`SHAPE_RATE`): a change of the machine's load shows in every size, a size's own bump
        only in it, so most of a change seen in one size alone is taken as load; the bump shows against the
        other sizes measured about then.
        """
        share = self._verify.get(n)
        if share is None or share <= 0.0 or seconds <= 0.0:
            return
        ratio = min(max(seconds / (self._load * share), 1.0 / LOAD_CLIP), LOAD_CLIP)
        self._load *= ratio**LOAD_RATE

    @property
    def load(self) -> float:
        """The machine's load against the one the costs were first measured at (1: the same)."""
        return self._load

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

    def verify_cost(self, n: int) -> float:
        """Estimated seconds to verify a batch of n tokens.

        A least-squares line through the measured sizes, each weighted by how
        often it was measured: single sizes are measured rarely and noisily,
        and a bumpy cost curve makes the chosen depth jump around. A size
        measured often moves from the line toward its own cost (kernels change
        at some batch sizes, and the depth the controller settles on is the one
        measured most). One token is the extreme case once measured a few
        times: a one-token pass takes another kernel path (a matrix-vector
        product), a line through the batches can misstate it, and with it plain
        decoding's rate, by a fifth on a CPU, so it is taken as measured and the
        line leaves it out where two batch sizes are known. A batch never costs
        less than that pass plus the line's slope for each extra token: a line
        fitted to noisy timings of deep batches can fall below it at two or
        three tokens, and short rounds then look cheaper than plain decoding;
        floored at the pass alone, those extra tokens were free to verify.
        """
        if not self._verify:
            return 1.0
        plain = self._verify_count.get(1, 0) >= PLAIN_TRUSTED
        if n == 1 and plain:
            return self._verify[1] * self._load
        if self._line is None:
            self._line = self._fit_line()
        slope, intercept = self._line
        line = intercept + slope * n
        count = self._verify_count.get(n, 0)
        if count:  # a size measured often keeps its own bump (kernels change at some batch sizes)
            line += count / (count + VERIFY_TRUSTED) * (self._verify[n] - line)
        if plain and n > 1:
            line = max(line, self._verify[1] + slope * (n - 1))
        return max(1e-6, line) * self._load

    def _fit_line(self) -> tuple[float, float]:
        """(slope, intercept) of verify seconds against batch size; refitted only after a new observation."""
        measured = sorted(self._verify)
        batches = [n for n in measured if n > 1]
        if self._verify_count.get(1, 0) >= PLAIN_TRUSTED and len(batches) >= 2:
            measured = batches
        sizes = np.array(measured, dtype=float)
        times = np.array([self._verify[int(x)] for x in sizes])
        if len(sizes) == 1:
            # One measured size: assume each extra token adds 30% of a single-token pass (a CPU-like prior).
            per_token = 0.3 * times[0] / sizes[0]
            return float(per_token), float(times[0] - sizes[0] * per_token)
        # Each size weighs as often as it was measured (up to VERIFY_TRUSTED rounds): a size seen once, perhaps
        # while the machine was busy, must not tilt the line and misstate plain decoding's cost, measured often.
        weights = np.array([min(self._verify_count[int(x)], VERIFY_TRUSTED) for x in sizes], dtype=float)
        slope, intercept = np.polyfit(sizes, times, 1, w=np.sqrt(weights))
        return max(float(slope), 0.0), float(intercept)

    def overhead(self, drafted: bool) -> float:
        """Estimated seconds a round spends outside the model passes (0 until measured)."""
        return self._overhead.get(drafted, self._overhead.get(not drafted, 0.0)) * self._load

    def draft_cost(self, k: int) -> float:
        """Estimated seconds to draft k tokens: the catch-up, k distributions and draws, k - 1 more decodes.

        Unmeasured parts borrow from measured ones (a drafter without a catch-up,
        like n-gram lookup, costs ``k * step``); with nothing measured yet a step
        is guessed at 30% of a one-token verify.
        """
        if k == 0:
            return 0.0
        step = self._draft_step if self._draft_step is not None else self._draft_sync
        if step is None:
            step = 0.3 * self.verify_cost(1) / self._load
        sync = self._draft_sync if self._draft_sync is not None else step
        sample = self._draft_sample if self._draft_sample is not None else 0.0
        return (sync + k * sample + (k - 1) * step) * self._load

    def predicted_rate(self, k: int) -> float:
        """Expected tokens per second at depth k under the current estimates."""
        if self.positional:
            tokens = expected_tokens_curve(self.acceptance_curve(), k)
        else:
            tokens = expected_tokens(self.alpha, k)
        return tokens / (self.draft_cost(k) + self.verify_cost(k + 1) + self.overhead(k > 0))

    def choose(self, max_depth: int | None = None) -> int:
        limit = self.max_depth if max_depth is None else max_depth
        if 1 not in self._verify:
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
        return any(expected_tokens_curve(self._long_curve, k)
                   / (self.draft_cost(k) + self.verify_cost(k + 1) + self.overhead(True)) > plain
                   for k in range(1, limit + 1))

    def measured_plain(self) -> bool:
        """Whether a plain round (a one-token verify) has been measured."""
        return 1 in self._verify

    def plain_rate_estimate(self) -> float:
        """Tokens per second of plain decoding (one token per pass), or 0 before any round."""
        return 1.0 / (self.verify_cost(1) + self.overhead(False)) if self._verify else 0.0

    def predicted_best_rate(self) -> float:
        return max(self.predicted_rate(k) for k in range(self.max_depth + 1))
