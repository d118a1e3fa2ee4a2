"""The stats panel's figures on real replies of the demo pair: the speed-up, the plain figure it was computed
from and the reply's tokens/s add up, live and reopened; a reply slower than the pair's quiet rate says the
machine is busy, once."""

from __future__ import annotations

import re
import time

import pytest

from specchat.core.chat.baseline import Baseline, remember
from specchat.core.chat.store import ConversationStore
from specchat.core.types import DrafterKind
from specchat.ui.main_window import MainWindow
from specchat.ui.stats_panel import StatsPanel

pytestmark = pytest.mark.slow

LOAD_TIMEOUT = 120_000
REPLY_TIMEOUT = 300_000
PROMPT = "List the days of the week, one per line."


def open_window(qtbot, settings, store, demo_pair) -> MainWindow:
    # The draft model at depth 4: its rounds allow a ratio well above 1, so timing noise between the reply and
    # its probe does not push the ratio over its ceiling (where the panel shows no figure).
    settings.max_tokens, settings.depth, settings.drafter = 32, 4, DrafterKind.DRAFT_MODEL
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=LOAD_TIMEOUT):
        window.load_models(demo_pair.target, demo_pair.draft)
    qtbot.waitUntil(lambda: window.stats.baseline is not None, timeout=REPLY_TIMEOUT)  # the calibration
    return window


def figures(stats: StatsPanel) -> tuple[str, str, str]:
    return stats.tokens_per_second.text(), stats.plain.text(), stats.speedup.text()


def assert_adds_up(shown: tuple[str, str, str]) -> None:
    """Tokens/s over the plain figure shown is the speed-up shown, within the rounding of the three."""
    tps_text, plain_text, speedup_text = shown
    assert plain_text.endswith(" tok/s\nright after this reply"), plain_text
    match = re.fullmatch(r"×(\d+\.\d\d) measured", speedup_text)
    assert match, speedup_text
    tps, plain, ratio = float(tps_text), float(plain_text.split()[0]), float(match.group(1))
    low, high = (tps - 0.05) / (plain + 0.05), (tps + 0.05) / (plain - 0.05)  # each shown to 1 decimal
    assert low - 0.005 <= ratio <= high + 0.005, (tps, plain, ratio)


def test_the_plain_figure_shown_is_the_speedups_own_live_after_a_measurement_and_reopened(
    qtbot, settings, store, demo_pair
) -> None:
    window = open_window(qtbot, settings, store, demo_pair)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT) as blocker:
        window.send(PROMPT)
    probe = blocker.args[0].stats
    assert probe.plain_tokens > 0
    live = figures(window.stats)
    assert_adds_up(live)
    assert live[1] == f"{round(probe.plain_tokens_per_second, 2):.1f} tok/s\nright after this reply"
    with qtbot.waitSignal(window.baselines.measured, timeout=REPLY_TIMEOUT) as measured:
        window.stats.measure_button.click()  # a newer plain figure for the pair...
    assert f"{measured.args[0]:.1f} tok/s, just now" in window.stats.plain.toolTip()
    assert figures(window.stats) == live  # ...changes none of the reply's figures
    window.close()
    store.close()

    reopened = ConversationStore()  # a new window on the same data folder, no model loaded
    second = MainWindow(settings, reopened)
    qtbot.addWidget(second)
    assert second.model_info is None and second.transcript.messages[-1].role == "assistant"
    assert figures(second.stats) == live
    second.close()
    reopened.close()


def test_a_reply_slower_than_the_pairs_quiet_rate_says_the_machine_is_busy_once(
    qtbot, settings, store, demo_pair
) -> None:
    """The stored baseline stands for a quiet machine far faster than this one (1000 tokens/s: the demo's F32
    target reads its 540 MB of weights per token, which no CPU here does 600 times a second): the first
    reply's probe starts a busy spell and the status bar says so; the next reply, as slow, says nothing more."""
    window = open_window(qtbot, settings, store, demo_pair)
    assert window.stats.baseline is not None
    key, quiet = window.stats.baseline.key, 1000.0
    settings.baselines = remember({}, Baseline(key, quiet, 48, time.time()))
    shown: list[str] = []
    window.statusBar().messageChanged.connect(shown.append)
    probes = []
    for prompt in (PROMPT, "Name three colours."):
        with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT) as blocker:
            window.send(prompt)
        probes.append(blocker.args[0].stats.plain_tokens_per_second)
    notes = [text for text in shown if text.startswith("The machine is busy")]
    assert len(notes) == 1, shown
    assert f"at {probes[0] / quiet:.0%} of its quiet speed ({probes[0]:.1f} of {quiet:.1f} tokens/s" in notes[0]
    stored = Baseline.from_json(settings.baselines[key])
    assert stored is not None and stored.tokens_per_second == probes[1] and stored.quiet[0] == quiet
