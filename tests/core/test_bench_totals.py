"""The benchmark's overall figures: ratios of sums over prompts."""

from __future__ import annotations

import pytest

from specchat.cli.bench import BenchReport, RunFigures, Totals
from specchat.core.chat.transcript import ReplyFigures
from specchat.core.types import GenerationStats


def run(generated: int, seconds: float, drafted: int = 0, accepted: int = 0, rounds: int = 0) -> RunFigures:
    """A decoded prompt's figures as bench folds them from the engine's events."""
    stats = GenerationStats(
        rounds=rounds, drafted=drafted, accepted=accepted, generated=generated, generate_seconds=seconds
    )
    return RunFigures(
        [], ReplyFigures(rounds=rounds, drafted=drafted, accepted=accepted, generated=generated, final=stats)
    )


def test_totals_weigh_prompts_by_their_tokens() -> None:
    tot = Totals()
    # Prompt 1: 100 tokens plain in 2 s, 100 speculative in 1 s (predicted 125 tok/s).
    tot.add(
        run(100, 2.0),
        run(100, 1.0, drafted=80, accepted=60, rounds=20),
        native_tokens=100,
        native_seconds=1.9,
        predicted_rate=125.0,
    )
    # Prompt 2: 20 tokens plain in 0.5 s, 20 speculative in 0.4 s (predicted 40 tok/s).
    tot.add(
        run(20, 0.5),
        run(20, 0.4, drafted=20, accepted=5, rounds=10),
        native_tokens=20,
        native_seconds=0.5,
        predicted_rate=40.0,
    )
    report = BenchReport(depth="4")
    tot.fill(report)
    assert report.baseline_tokens_per_s == pytest.approx(120 / 2.5)
    assert report.speculative_tokens_per_s == pytest.approx(round(120 / 1.4, 2))
    assert report.speedup == pytest.approx(round(report.speculative_tokens_per_s / report.baseline_tokens_per_s, 3))
    assert report.native_tokens_per_s == pytest.approx(50.0)
    assert report.plain_vs_native == pytest.approx(round(48.0 / 50.0, 3))
    assert report.acceptance_rate == pytest.approx(65 / 100)
    assert report.mean_accepted_per_round == pytest.approx(round(65 / 30, 3))
    assert report.predicted_tokens_per_s == pytest.approx(round(120 / (100 / 125 + 20 / 40), 2))
    assert report.fraction_of_predicted == pytest.approx(
        round(report.speculative_tokens_per_s / report.predicted_tokens_per_s, 3)
    )


def test_empty_totals_leave_zeros() -> None:
    report = BenchReport(depth="auto")
    Totals().fill(report)
    assert (report.speedup, report.speculative_tokens_per_s, report.fraction_of_predicted) == (0.0, 0.0, 0.0)
