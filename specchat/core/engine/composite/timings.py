"""Timings: what the model drafter's steps cost, learnt as moving averages of its own rounds.

Each figure is kept in units of the target's one-token verify pass measured at
the same time (a shared machine's load moves both alike, so the ratio stays
current while absolute timings go stale) and is multiplied back into seconds
by :meth:`ModelTimings.priced` each round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specchat.core.engine.composite import tuning
from specchat.core.engine.costs import STEP_GUESS
from specchat.core.engine.drafters.base import Draft


def ema(old: float | None, new: float, decay: float = tuning.TIMING_DECAY) -> float:
    """A moving average: ``new`` where nothing was kept, else ``decay`` of ``old`` and the rest of ``new``."""
    return new if old is None else decay * old + (1 - decay) * new


def timed(old: float | None, new: float) -> float:
    """:func:`ema` of a timing, ``new`` clipped to :data:`tuning.TIMING_CLIP` times ``old``: one stall (a busy
    machine's scheduler taking the core away) moves the average a little, a lasting slowdown within a few rounds."""
    if old:  # a kept 0 (a catch-up that cost nothing beyond its first draft) clips nothing
        new = min(new, tuning.TIMING_CLIP * old)
    return ema(old, new)


@dataclass
class ModelTimings:
    """The model drafter's costs in units of a one-token verify pass (None: not timed yet)."""

    fixed: float | None = None  # its first draft of a round in steady state (a 1-2 token catch-up and a pass)
    step: float | None = None  # each further draft: a decode plus its distribution and draw
    catch_up: float | None = None  # per token the draft model decodes to catch up after sitting out rounds
    read_token: float | None = None  # per prompt token the model reads

    @property
    def measured(self) -> bool:
        """Whether its first draft has been timed (until then the composite forces a few model rounds)."""
        return self.fixed is not None

    def priced(self, unit: float, follows_text: bool) -> tuple[float, float, float]:
        """Seconds now, at ``unit`` seconds a one-token pass: the first draft, each further one, a catch-up token.

        Untimed figures are guessed: a step at :data:`~specchat.core.engine.costs.STEP_GUESS` of a pass, the
        first draft as a step, a catch-up token at :data:`tuning.CATCH_UP_SHARE` of a step (0 for a model
        that does not follow the text: it has nothing to catch up on).
        """
        step = (self.step if self.step is not None else STEP_GUESS) * unit
        fixed = self.fixed * unit if self.fixed is not None else step
        catch_up = 0.0
        if follows_text:
            catch_up = self.catch_up * unit if self.catch_up is not None else tuning.CATCH_UP_SHARE * step
        return fixed, step, catch_up

    def read(self, tokens: int, seconds: float, unit: float) -> None:
        """Time a read of ``tokens`` prompt tokens that took ``seconds`` (a short read says little)."""
        if tokens >= tuning.MIN_READ:
            self.read_token = timed(self.read_token, seconds / unit / tokens)

    def stepped(self, seconds: float, unit: float) -> None:
        """Time one decode of a committed token (:meth:`~specchat.core.engine.drafters.base.Drafter.time_step`):
        a draft step's cost now, the first draft moved by the same factor.

        A quicker decode moves the step halfway at once (by the geometric mean): these are rare, a busy machine
        does not make a decode quick, and a model kept out by its timings is drafted again only once they say
        it pays. A slower one counts as any timing does (:func:`timed`)."""
        if self.step is None or self.fixed is None or self.step <= 0.0:
            return
        old, new = self.step, seconds / unit
        self.step = math.sqrt(old * new) if new < old else timed(old, new)
        self.fixed *= self.step / old

    def drafted(self, drafted: Draft, seconds: float, unit: float) -> None:
        """Time one round's model drafts, which took ``seconds`` in all."""
        if drafted.catch_up >= tuning.MIN_CATCH_UP and drafted.catch_up_seconds is not None and self.fixed is not None:
            extra = drafted.catch_up_seconds / unit - self.fixed
            self.catch_up = timed(self.catch_up, max(extra, 0.0) / (drafted.catch_up - 1))
        if not drafted.tokens:
            return
        sample = drafted.sample_seconds or 0.0
        if drafted.step_seconds is not None:
            self.step = timed(self.step, (drafted.step_seconds + sample) / unit)
        # The first draft's cost: the model's catch-up when it was the usual one (a long catch-up after
        # lookup rounds is paid once and says little about the next round).
        if drafted.sync_seconds is not None:
            self.fixed = timed(self.fixed, (drafted.sync_seconds + sample) / unit)
        elif self.step is not None:
            # In step, the first draft costs about what a further one does: an estimate that only long
            # catch-ups followed (probes after plain rounds) would otherwise never be corrected.
            self.fixed = timed(self.fixed, self.step)
        elif self.fixed is None and len(drafted.tokens) == 1:
            self.fixed = seconds / unit
        if drafted.step_seconds is None and self.step is not None and self.fixed is not None and self.step > self.fixed:
            # A further draft costs no more than the first, which decodes and draws too. Rounds of one draft
            # time no step, so without this a step a stall left dear kept every round at one draft for good.
            self.step = timed(self.step, self.fixed)
