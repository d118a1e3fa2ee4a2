"""Whether the machine is busy enough to cost the replies, from figures the window already has.

Each reply's probe (plain decoding timed right after it, ``GenerationStats.plain_tokens_per_second``) is
compared with this pair's quiet rate under the same settings: the fastest plain decoding measured for them
within :data:`QUIET_FOR` (kept with the stored baseline, :func:`with_quiet`). A probe under
:data:`BUSY_SHARE` of it starts a busy spell, said once (:class:`BusyWatch`); the spell ends once a probe is
back at :data:`CALM_SHARE`. A probe late in a long context runs slower for that too, which the margin allows
for on the context lengths small machines use.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specchat.core.chat.baseline import Baseline

BUSY_SHARE = 0.6  # a probe under 60% of the quiet rate: the machine is busy enough to cost the reply
CALM_SHARE = 0.8  # a spell ends once a probe is back at 80% (so a rate near 60% is not news again and again)
QUIET_FOR = 7 * 86400.0  # seconds a quiet figure stands unless a faster one replaces it


def with_quiet(new: Baseline, previous: Baseline | None) -> Baseline:
    """``new`` (a probe or a calibration) carrying the quiet rate: ``previous``'s while it is faster and
    younger than :data:`QUIET_FOR` at ``new``'s time, else ``new``'s own."""
    if previous is None or previous.key != new.key:
        return new
    rate, at = previous.quiet
    if rate <= new.tokens_per_second or new.measured_at - at > QUIET_FOR:
        return replace(new, quiet_tokens_per_second=0.0, quiet_at=0.0)
    return replace(new, quiet_tokens_per_second=rate, quiet_at=at)


@dataclass
class BusyWatch:
    """Says when a busy spell starts, once; nothing while it lasts or once it has ended."""

    busy: bool = False

    def see(self, rate: float, quiet: float) -> str | None:
        """The note for a reply whose probe ran at ``rate`` tokens/s against the ``quiet`` rate (0: none known):
        a line when this probe starts a busy spell, else None."""
        if rate <= 0 or quiet <= 0:
            return None
        share = rate / quiet
        if self.busy:
            self.busy = share < CALM_SHARE
            return None
        if share >= BUSY_SHARE:
            return None
        self.busy = True
        return (
            f"The machine is busy: this pair decodes at {share:.0%} of its quiet speed ({rate:.1f} of "
            f"{quiet:.1f} tokens/s plain), so replies are slower than they would be"
        )
