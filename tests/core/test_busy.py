"""The busy note: a reply's plain probe against the pair's quiet rate, said once per busy spell."""

from __future__ import annotations

from specchat.core.chat.baseline import Baseline, remember
from specchat.core.chat.busy import BUSY_SHARE, CALM_SHARE, QUIET_FOR, BusyWatch, with_quiet


def test_a_busy_spell_is_said_once_when_it_starts_and_again_only_after_it_ended() -> None:
    watch = BusyWatch()
    assert watch.see(7.0, 10.0) is None and not watch.busy  # 70%: not busy enough to say
    note = watch.see(3.0, 10.0)
    assert note == (
        "The machine is busy: this pair decodes at 30% of its quiet speed (3.0 of 10.0 tokens/s "
        "plain), so replies are slower than they would be"
    )
    assert watch.see(2.0, 10.0) is None  # the same spell
    assert watch.see(7.0, 10.0) is None and watch.busy  # between the two shares: still the same spell
    assert watch.see(3.0, 10.0) is None
    assert watch.see(8.0, 10.0) is None and not watch.busy  # back at 80%: the spell is over
    assert watch.see(5.0, 10.0) is not None  # a new spell is news again


def test_the_shares_sit_at_their_edges() -> None:
    quiet = 10.0
    assert BusyWatch().see(quiet * BUSY_SHARE, quiet) is None
    assert BusyWatch().see(quiet * BUSY_SHARE - 0.01, quiet) is not None
    watch = BusyWatch(busy=True)
    watch.see(quiet * CALM_SHARE - 0.01, quiet)
    assert watch.busy
    watch.see(quiet * CALM_SHARE, quiet)
    assert not watch.busy


def test_no_quiet_rate_or_no_probe_says_nothing() -> None:
    watch = BusyWatch()
    assert watch.see(1.0, 0.0) is None and watch.see(0.0, 10.0) is None and not watch.busy


def test_the_quiet_rate_is_the_fastest_recent_figure_for_the_same_key() -> None:
    quiet = Baseline("k", 10.0, 48, 1000.0)
    busy = with_quiet(Baseline("k", 3.0, 16, 2000.0), quiet)
    assert busy.tokens_per_second == 3.0 and busy.quiet == (10.0, 1000.0)  # the probe is newest, the quiet kept
    again = with_quiet(Baseline("k", 4.0, 16, 3000.0), busy)
    assert again.quiet == (10.0, 1000.0)
    faster = with_quiet(Baseline("k", 12.0, 16, 4000.0), again)
    assert faster.quiet == (12.0, 4000.0) and faster.quiet_tokens_per_second == 0.0
    stale = with_quiet(Baseline("k", 3.0, 16, 1000.0 + QUIET_FOR + 1), busy)
    assert stale.quiet == (3.0, 1000.0 + QUIET_FOR + 1)  # a week on, the quiet figure is the newest
    other = with_quiet(Baseline("other", 3.0, 16, 2000.0), quiet)
    assert other.quiet == (3.0, 2000.0)  # another pair or settings: nothing carried


def test_the_quiet_rate_is_kept_in_the_stored_form_and_old_forms_still_read() -> None:
    busy = with_quiet(Baseline("k", 3.0, 16, 2000.0), Baseline("k", 10.0, 48, 1000.0))
    stored = remember({}, busy)
    assert Baseline.from_json(stored["k"]) == busy
    old = {"key": "k", "tokens_per_second": 3.0, "tokens": 16, "measured_at": 2000.0}
    assert Baseline.from_json(old) == Baseline("k", 3.0, 16, 2000.0)
    assert Baseline.from_json({**old, "quiet_tokens_per_second": "fast"}) == Baseline("k", 3.0, 16, 2000.0)
    assert Baseline.from_json({**old, "quiet_at": float("nan")}) == Baseline("k", 3.0, 16, 2000.0)
