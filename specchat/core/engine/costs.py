"""What a round costs: the target's verify pass by batch size, the round's overhead, the drafter's steps.

One model, :class:`RoundCosts`, answers for every reader: the depth
controller (:class:`~specchat.core.engine.depth.AdaptiveDepth`) learns it round
by round, a drafter that prices its own rounds (the composite) reads it through
the narrow :class:`CostView`, and the draft finder fits it to a calibration's
rounds (:meth:`RoundCosts.fitted`).

The verify cost is a least-squares line through the measured batch sizes, each
weighted by how often it was measured; a size measured often keeps its own
bump; the one-token pass, once measured a few times, is taken as measured
(it takes another kernel path); and a batch never costs less than that pass
plus the line's slope per extra token. On a shared machine every cost is kept
at a reference load and multiplied by the current load, which every round's
verify pass moves: costs measured at different times stay comparable. A round
whose verify pass ran on a thread count the tuner was trying is not given to
this model at all (``AdaptiveDepth.observe`` with no verify time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np

VERIFY_TRUSTED = 8
"""Rounds of one batch size after which its verify cost counts fully in the cost line."""
PLAIN_TRUSTED = 3
"""One-token passes measured after which plain decoding's cost is taken as measured rather than from the line."""
LOAD_RATE = 0.5
"""Weight of one round's timing (in log) in the machine's load estimate, which scales every cost."""
LOAD_CLIP = 4.0
"""One round moves the load estimate as if it had been at most this many times slower (or faster) than expected."""
SHAPE_RATE = 0.1
"""Weight of one round in a batch size's verify cost at the reference load (a moving average)."""
CPU_SLOPE = 0.3
"""Before two sizes are measured: each extra token of a batch costs this share of a one-token pass (CPU-like)."""
STEP_GUESS = 0.3
"""Before any draft is timed: a draft step costs this share of a one-token verify pass."""
MAX_VERIFY_SLOPE = 0.3
"""In :meth:`RoundCosts.verify_costs`, each extra token of a batch costs at most this share of a one-token pass
(measured on CPUs: 0.1-0.2); a line left steep by one batch timed at a load spike cannot price drafting out."""


class TimedRound(Protocol):
    """One round's timings, as a calibration records them (:class:`~specchat.core.advise.calibrate.RoundSample`)."""

    @property
    def drafted(self) -> int: ...

    @property
    def verify(self) -> float: ...

    @property
    def overhead(self) -> float | None: ...

    @property
    def step(self) -> float | None: ...

    @property
    def sync(self) -> float | None: ...

    @property
    def sample(self) -> float | None: ...


class CostView(Protocol):
    """What a drafter reads of the round costs (seconds at the machine's load now)."""

    def measured_plain(self) -> bool:
        """Whether a one-token pass has been measured (before it, nothing here is worth pricing with)."""
        ...

    def verify_costs(self, n_max: int) -> tuple[float, ...]:
        """Seconds to verify a batch of n tokens for n < ``n_max`` (index 0 unused), monotone in n."""
        ...

    def overhead(self, drafted: bool) -> float:
        """Seconds a plain or a drafted round spends outside the model passes."""
        ...


def unmeasured_verify_costs(n_max: int) -> tuple[float, ...]:
    """:meth:`CostView.verify_costs` before anything is measured, in units of a one-token pass (CPU-like)."""
    return tuple(1.0 + CPU_SLOPE * (n - 1) for n in range(n_max))


class RoundCosts:
    """The costs of a round's parts, learned from timed rounds (:meth:`observe`) or fitted (:meth:`fitted`)."""

    def __init__(self, decay: float = 0.85) -> None:
        self.decay = decay  # weight of the old value in the overhead and draft-timing averages
        self._draft_step: float | None = None  # seconds per draft decode after the first
        self._draft_sample: float | None = None  # seconds per drafted token for its distribution and draw
        self._draft_sync: float | None = None  # seconds for the draft's per-round catch-up (first token)
        self._verify: dict[int, float] = {}  # batch size -> seconds at the reference load
        self._verify_count: dict[int, int] = {}  # batch size -> rounds measured
        self._overhead: dict[bool, float] = {}  # drafted round? -> seconds outside the model passes
        self._line: tuple[float, float] | None = None  # verify-cost fit (slope, intercept), None = stale
        self._load = 1.0  # the machine's load now: the costs above are kept at load 1 and multiplied by it

    @classmethod
    def fitted(cls, rounds: Iterable[TimedRound]) -> RoundCosts:
        """The costs a calibration's rounds show, at the load they were measured at.

        Each batch size's cost is the mean of its rounds (what a reply pays, slow rounds included) and
        counts as many rounds as it had; overheads and draft timings are plain means.
        """
        rounds = list(rounds)
        if not rounds:
            raise ValueError("no rounds to fit the verify cost to")
        out = cls()
        by_size: dict[int, list[float]] = {}
        for r in rounds:
            by_size.setdefault(r.drafted + 1, []).append(r.verify)
        out._verify = {n: float(np.mean(times)) for n, times in by_size.items()}
        out._verify_count = {n: len(times) for n, times in by_size.items()}
        for drafted in (False, True):
            seconds = _mean([r.overhead for r in rounds if (r.drafted > 0) == drafted])
            if seconds is not None:
                out._overhead[drafted] = seconds
        drafting = [r for r in rounds if r.drafted > 0]
        out._draft_step = _mean([r.step for r in drafting])
        out._draft_sync = _mean([r.sync for r in drafting])
        out._draft_sample = _mean([r.sample for r in drafting])
        return out

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else self.decay * old + (1 - self.decay) * new

    def observe(
        self,
        n_drafted: int,
        verify_seconds: float,
        overhead_seconds: float | None = None,
        step_seconds: float | None = None,
        sync_seconds: float | None = None,
        sample_seconds: float | None = None,
    ) -> None:
        """Record one finished round's timings (see :meth:`AdaptiveDepth.observe
        <specchat.core.engine.depth.AdaptiveDepth.observe>` for what each one times)."""
        n = n_drafted + 1
        self._track_load(n, verify_seconds)
        load = self._load
        if overhead_seconds is not None:
            key = n_drafted > 0
            self._overhead[key] = self._ema(self._overhead.get(key), max(0.0, overhead_seconds) / load)
        if n_drafted > 0:
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

    def measured_plain(self) -> bool:
        """Whether a plain round (a one-token verify) has been measured."""
        return 1 in self._verify

    def verify_cost(self, n: float) -> float:
        """Estimated seconds to verify a batch of n tokens (1 before anything is measured).

        A least-squares line through the measured sizes, each weighted by how
        often it was measured (up to :data:`VERIFY_TRUSTED`): a size seen once,
        perhaps while the machine was busy, must not tilt the line. A size
        measured often moves from the line toward its own cost (kernels change
        at some batch sizes). The one-token pass, measured
        :data:`PLAIN_TRUSTED` times, is taken as measured and left out of the
        line where two batch sizes are known: it takes another kernel path (a
        matrix-vector product) and a line through the batches can misstate it
        by a fifth on a CPU. A batch never costs less than that pass plus the
        line's slope for each extra token.
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
        size = int(n)
        count = self._verify_count.get(size, 0) if size == n else 0  # a fractional n (a mean) has none
        if count:
            line += count / (count + VERIFY_TRUSTED) * (self._verify[size] - line)
        if plain and n > 1:
            line = max(line, self._verify[1] + slope * (n - 1))
        return max(1e-6, line) * self._load

    def verify_costs(self, n_max: int) -> tuple[float, ...]:
        """:meth:`verify_cost` for n < ``n_max``, each extra token capped at :data:`MAX_VERIFY_SLOPE` of a
        one-token pass and made monotone: a size's own measured bump can dip below its neighbour's and make
        the longer round look cheaper than the shorter."""
        verify = tuple(self.verify_cost(n) for n in range(n_max))
        if n_max < 2:
            return verify
        verify = tuple(
            min(v, verify[1] * (1.0 + MAX_VERIFY_SLOPE * (n - 1))) if n > 1 else v for n, v in enumerate(verify)
        )
        return verify[:1] + tuple(np.maximum.accumulate(verify[1:]))

    def _fit_line(self) -> tuple[float, float]:
        """(slope, intercept) of verify seconds against batch size; refitted only after a new observation."""
        measured = sorted(self._verify)
        batches = [n for n in measured if n > 1]
        if self._verify_count.get(1, 0) >= PLAIN_TRUSTED and len(batches) >= 2:
            measured = batches
        sizes = np.array(measured, dtype=float)
        times = np.array([self._verify[int(x)] for x in sizes])
        if len(sizes) == 1:
            per_token = CPU_SLOPE * times[0] / sizes[0]
            return float(per_token), float(times[0] - sizes[0] * per_token)
        weights = np.array([min(self._verify_count[int(x)], VERIFY_TRUSTED) for x in sizes], dtype=float)
        slope, intercept = np.polyfit(sizes, times, 1, w=np.sqrt(weights))
        return max(float(slope), 0.0), float(intercept)

    def overhead(self, drafted: bool) -> float:
        """Estimated seconds a round spends outside the model passes (the other kind's until measured; 0)."""
        return self._overhead.get(drafted, self._overhead.get(not drafted, 0.0)) * self._load

    def draft_cost(self, k: int) -> float:
        """Estimated seconds to draft k tokens: the catch-up, k distributions and draws, k - 1 more decodes.

        Unmeasured parts borrow from measured ones (a drafter without a catch-up,
        like n-gram lookup, costs ``k * step``); with nothing measured yet a step
        is guessed at :data:`STEP_GUESS` of a one-token verify.
        """
        if k == 0:
            return 0.0
        step = self._draft_step if self._draft_step is not None else self._draft_sync
        if step is None:
            step = STEP_GUESS * self.verify_cost(1) / self._load
        sync = self._draft_sync if self._draft_sync is not None else step
        sample = self._draft_sample if self._draft_sample is not None else 0.0
        return (sync + k * sample + (k - 1) * step) * self._load

    def round_cost(self, k: int) -> float:
        """Estimated seconds of a round drafting k tokens (0: a plain round)."""
        return self.draft_cost(k) + self.verify_cost(k + 1) + self.overhead(k > 0)

    def plain_rate(self) -> float:
        """Tokens per second of plain decoding (one token per pass), or 0 before any round."""
        return 1.0 / (self.verify_cost(1) + self.overhead(False)) if self._verify else 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return float(np.mean(measured)) if measured else None
