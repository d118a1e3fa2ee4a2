"""How many threads a context decodes with: chosen by measuring, so that a busy machine does not stall it.

llama.cpp's CPU threads meet at a barrier after every operation of a decode,
and a waiting thread spins. On an idle machine that is the fastest way to
decode; on a busy one a thread the scheduler has taken off its core holds
every other thread at the next barrier, hundreds of times a token. Measured on
2 cores (docs/benchmarks.md, "A busy machine"): with one busy
process beside it, plain decoding ran at 17 tok/s with 2 threads and 49 with
1; idle, 2 threads were 10% faster. The best count moves with the load, so
:class:`ThreadTuner` keeps measuring: it times each decode with the count in
use, now and then tries another against it on the same work (every so many
decodes or seconds of decoding, each doubled by a lost try, or at once after
:data:`SLOW_RUN` decodes in a row far slower than its average, or, for fewer
threads, when its stalls double its real time, :data:`STALLING`), and keeps
whichever was faster, stalls counted. A count left because it stalled is tried again ever more rarely,
as a count that lost a try is. On a machine already busy when a model loads it
starts with one thread fewer (:func:`starting_counts`).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from statistics import fmean

# Decodes with the count in use before another is tried (the first try comes after FIRST_TRY). Set: a try costs
# a switch of OpenMP's team, which under load took up to a second (docs/benchmarks.md), so tries are rare.
EXPLORE_EVERY = 128
FIRST_TRY = 8
# A lost try doubles the decodes to the next, up to this many times EXPLORE_EVERY: under a heavy load a try of
# more threads is what costs (a second or more). Set: unmeasured.
MAX_BACKOFF = 16
# A try whose decode after the switch's first takes this many times the count in use's ends there, lost.
# Set: unmeasured (the stalls seen under load were 5-50 times a decode).
ABORT_RATIO = 2.5
# A try whose first decode (the switch's own, slower than the rest) takes this many times the count in use's ends
# there, lost: beside two busy processes a try of two threads took 3 s a decode against 50 ms with one, and a
# second such decode only confirmed it (docs/benchmarks.md, "The thread tuner's tries under load"). Set: above the
# switch's own cost (under 3 times a decode in the same trace).
STALL_RATIO = 20.0
# Seconds of decoding with the count in use after which another is tried, however many decodes that is, doubled
# with each lost try as the decodes are: when lost tries have pushed the next one thousands of decodes away, a
# count that has grown slow little by little is still tried against (a sudden slowdown is answered at once, by
# SLOW_RUN). Not a fixed period: beside two busy processes a decode with two threads took 3 s (docs/benchmarks.md,
# "The crawl, traced"), so a try, which lasts two such decodes before it is given up, every 10 s of decoding
# would cost a third of the time there.
TRY_SECONDS = 10.0
# A try is timed against the count in use's average, or the median of its latest this many decodes where that is
# slower: the average is clipped against stalls, so after a lasting slowdown it lags for tens of decodes.
RECENT = 3
# Decodes in a row a try lasts; its median decides (the switch's own slow first decode does not). Set: unmeasured.
TRY_DECODES = 5
# A try must be this much faster than the count in use to replace it. Set: unmeasured (a margin over noise).
MARGIN = 0.05
# Each new timing of the count in use weighs 1 minus this; a timing is clipped at CLIP times the average first,
# so one stall does not hide the count's speed for long. Set: unmeasured.
DECAY = 0.8
CLIP = 3.0
# Decodes in a row of the count in use, each over ABORT_RATIO times its average, after which another count is tried at
# once: a load that arrives is answered within a few decodes, not after TRY_SECONDS of them. Set: unmeasured.
SLOW_RUN = RECENT
# The count in use's decodes, stalls included (an unclipped average), over this many times its clipped average start
# a try of fewer threads at once: beside two busy processes two threads decoded in 35 ms most times and 0.4-3 s now
# and then (docs/benchmarks.md, "Intermittent stalls"), which the clipped average, and a try's median, leave out.
# Not a try of more threads: beside the same load two threads stalled for seconds where one stalled for tenths.
# Set: stalls costing as much again as the decodes themselves.
STALLING = 2.0
# Only decodes in this bucket and below are averaged with their stalls: prompt reads, in the last bucket, vary
# with their size alone by more than STALLING.
STALL_BUCKET = 2
# Only decodes in this bucket and below count towards it: within a larger bucket the batch size alone changes the
# time several-fold (a prompt read in chunks and whole).
SLOW_BUCKET = 1
# A 1-minute load average (other processes' runnable threads) from which a tuner starts with one thread fewer than
# the machine has: measured on 2 cores, one busy process beside 2 threads made them 3 times slower than 1 thread
# (docs/benchmarks.md, "A busy machine"), and the first try comes only after FIRST_TRY decodes at that pace.
BUSY_LOAD = 1.0
# Batch sizes timed apart (upper bounds): one token, a short verify, a long verify, prompt reading.
BUCKETS = (1, 4, 16)


def default_threads() -> int:
    """Physical-ish core count: llama.cpp is slower with hyper-threads than without."""
    n = os.cpu_count() or 2
    return max(1, n // 2) if n > 4 else n


def starting_counts(n: int, load: float | None = None) -> tuple[int, ...]:
    """The counts a tuner chooses among for an ``n``-thread machine, the one to start with first: one fewer
    where the machine is already busy (``load``: the 1-minute load average, read from the system where None)."""
    if n <= 1:
        return (n,)
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not on every platform
            load = 0.0
    return (n - 1, n) if load >= BUSY_LOAD else (n, n - 1)


def bucket(n_tokens: int) -> int:
    """The index of the batch-size bucket ``n_tokens`` falls in."""
    for i, top in enumerate(BUCKETS):
        if n_tokens <= top:
            return i
    return len(BUCKETS)


class ThreadTuner:
    """Chooses each decode's thread count among ``counts`` by trying the others now and then.

    ``counts``: the candidates, the first the one to start with (by default the
    machine's thread count and one fewer). A single candidate is a fixed count.
    Each decode with the count in use updates that count's time per decode for
    its context (``key``) and batch size; every :data:`EXPLORE_EVERY` decodes
    another count decodes :data:`TRY_DECODES` in a row, each timed against the
    count in use's time for the same context and batch size, so the two are
    compared at the same moment and on the same work. A try faster by
    :data:`MARGIN` (its median ratio) takes over; a try that loses waits twice
    as long for the next (a try of more threads on a busy machine is what
    costs), and one that stalls ends at once. The contexts that decode in
    turn (the target and its draft) share one tuner: OpenMP's team of threads
    is the process's, and a team that changes size every decode costs more than
    either size (measured: docs/benchmarks.md, "A busy machine").
    """

    def __init__(self, counts: Sequence[int] | None = None) -> None:
        if counts is None:
            counts = starting_counts(default_threads())
        if not counts or min(counts) < 1:
            raise ValueError(f"thread counts must be at least 1, got {list(counts)}")
        self.counts = tuple(dict.fromkeys(counts))
        self.current = self.counts[0]
        self._seconds: dict[tuple[int, int], float] = {}  # per (context, batch-size bucket): a decode's seconds
        self._until_try = FIRST_TRY
        self._since_try = 0.0  # seconds decoded with the count in use since the last try
        self._recent: dict[tuple[int, int], deque[float]] = {}  # its latest decodes' seconds, unclipped
        self._interval = EXPLORE_EVERY
        self._next = 1  # index into counts of the next count to try
        self._trying: int | None = None
        self._slow = 0  # decodes in a row of the count in use over ABORT_RATIO times its average
        self._mean: dict[tuple[int, int], float] = {}  # as _seconds, stalls included (not clipped)
        self._stalling = False  # the try under way began because the count in use stalled
        self._left_stalling: int | None = None  # the count last left because it stalled
        self._ratios: list[float] = []
        self.switches = 0  # how often the count in use changed
        self.tries = 0

    @property
    def fixed(self) -> bool:
        return len(self.counts) == 1

    def choose(self, n_tokens: int, key: int = 0) -> int:
        """The thread count for a decode of ``n_tokens`` by the context ``key``."""
        if (
            self._trying is None
            and not self.fixed
            and (self._until_try <= 0 or self._since_try >= TRY_SECONDS * self._interval / EXPLORE_EVERY)
            and (key, bucket(n_tokens)) in self._seconds
        ):
            others = [c for c in self.counts if c != self.current]
            self._trying = others[self._next % len(others)]
            self._next += 1
            self._ratios = []
            self.tries += 1
        return self._trying if self._trying is not None else self.current

    def observe(self, threads: int, n_tokens: int, seconds: float, key: int = 0) -> None:
        """Record that a decode of ``n_tokens`` by the context ``key`` with ``threads`` threads took ``seconds``."""
        if self.fixed or n_tokens <= 0:
            return
        b = (key, bucket(n_tokens))
        usual = self._seconds.get(b)
        if threads == self._trying:
            if usual is None:
                return
            recent = self._recent.get(b, ())
            if len(recent) == RECENT:  # the count in use's latest decodes, where the machine has slowed lately
                usual = max(usual, sorted(recent)[RECENT // 2])
            usual = max(usual, self._mean.get(b, usual))  # its stalls count against it
            self._ratios.append(seconds / usual)
            hopeless = self._ratios[-1] > (ABORT_RATIO if len(self._ratios) > 1 else STALL_RATIO)
            if len(self._ratios) < TRY_DECODES and not hopeless:
                return
            # Its typical decode and its mean (stalls included; not the switch's own first decode) must both win.
            ratio = max(sorted(self._ratios)[len(self._ratios) // 2], fmean(self._ratios[1:] or self._ratios))
            if ratio < 1.0 - MARGIN and not hopeless:
                left = self.current
                self.current = threads
                self.switches += 1
                self._seconds = {}  # timed afresh by the new count's own decodes (the average lagged the old one)
                self._recent = {}  # the latest decodes were the old count's
                if self._stalling:  # the count left stalls on this machine now: it is tried ever more rarely
                    self._left_stalling = left
                    self._interval = min(2 * self._interval, MAX_BACKOFF * EXPLORE_EVERY)
                elif threads != self._left_stalling:  # back to one that stalled: its wait stands
                    self._interval = EXPLORE_EVERY
            else:
                self._interval = min(2 * self._interval, MAX_BACKOFF * EXPLORE_EVERY)
            self._trying = None
            self._stalling = False
            self._mean = {}  # stalls before the try start no other: averaged afresh from the clipped average
            self._until_try = self._interval
            self._since_try = 0.0
            self._slow = 0
            return
        if threads != self.current:
            return
        self._until_try -= 1
        self._since_try += seconds
        self._recent.setdefault(b, deque(maxlen=RECENT)).append(seconds)
        if usual is None:
            self._seconds[b] = seconds
            return
        if b[1] <= SLOW_BUCKET:
            self._slow = self._slow + 1 if seconds > ABORT_RATIO * usual else 0
        self._seconds[b] = DECAY * usual + (1 - DECAY) * min(seconds, CLIP * usual)
        if b[1] <= STALL_BUCKET:
            self._mean[b] = DECAY * self._mean.get(b, usual) + (1 - DECAY) * seconds
            # Its stalls cost more than its decodes: try fewer threads now (more would meet at more barriers).
            if self._mean[b] > STALLING * self._seconds[b] and min(self.counts) < self.current:
                self._until_try = 0
                self._stalling = True
        if self._slow >= SLOW_RUN:  # the machine has slowed this count down: try another now
            self._until_try = 0
