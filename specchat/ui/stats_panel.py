"""Live figures for the current reply and a chart of accepted tokens per round."""

from __future__ import annotations

import math
import time
from typing import Any

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QPushButton, QVBoxLayout, QWidget

from specchat.core.chat.transcript import ReplyFigures


ASSUMED_DRAFT_COST = 0.1  # draft step / target step, for a live estimate before the engine's own


def estimated_speedup(rounds: int, drafted: int, generated: int) -> float:
    """Tokens per target pass, discounted by an assumed draft cost: a rough guide until measured."""
    if rounds == 0:
        return 0.0
    per_round = generated / rounds
    return per_round / (1.0 + ASSUMED_DRAFT_COST * drafted / rounds)


class StatsPanel(QGroupBox):
    """Tokens/s, acceptance, mean accepted per round, depth, speedup, and a per-round chart."""

    measure_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("This reply", parent)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.tokens_per_second = QLabel("–")
        self.acceptance = QLabel("–")
        self.mean_accepted = QLabel("–")
        self.depth_value = QLabel("–")
        self.speedup = QLabel("–")
        self.speedup.setToolTip("Against plain decoding of this pair (no drafter)")
        form.addRow("Tokens/s", self.tokens_per_second)
        form.addRow("Acceptance", self.acceptance)
        form.addRow("Accepted/round", self.mean_accepted)
        form.addRow("Depth", self.depth_value)
        form.addRow("Speedup", self.speedup)
        self.runs_on = QLabel("–")
        self.runs_on.setWordWrap(True)
        self.runs_on.setToolTip("Where each model's layers run (set GPU layers in the Speculation panel)")
        form.addRow("Runs on", self.runs_on)
        layout.addLayout(form)
        self.measure_button = QPushButton("Measure plain decoding")
        self.measure_button.setToolTip("Time this pair without a drafter once, to turn the estimate into a measurement")
        self.measure_button.clicked.connect(lambda *_: self.measure_requested.emit())
        layout.addWidget(self.measure_button)

        self.series = QLineSeries()
        self.series.setName("accepted per round")
        chart = QChart()
        chart.addSeries(self.series)
        chart.legend().hide()
        chart.setMargins(chart.margins() * 0)
        self.x_axis = QValueAxis()
        self.x_axis.setTitleText("round")
        self.y_axis = QValueAxis()
        self.y_axis.setTitleText("accepted")
        for axis in (self.x_axis, self.y_axis):  # whole-number ticks from 0
            axis.setLabelFormat("%d")
            axis.setTickType(QValueAxis.TickType.TicksDynamic)
            axis.setTickAnchor(0)
        chart.addAxis(self.x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(self.y_axis, Qt.AlignmentFlag.AlignLeft)
        self.series.attachAxis(self.x_axis)
        self.series.attachAxis(self.y_axis)
        self.chart_view = QChartView(chart)
        self.chart_view.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.chart_view.setMinimumHeight(160)
        layout.addWidget(self.chart_view, 1)

        self.baseline: float | None = None  # plain decoding tokens/s, once measured
        self.reset()

    def set_placement(self, target: str, draft: str) -> None:
        """Show where the loaded models run, e.g. ``target GPU (all 30 layers), draft CPU``."""
        self.runs_on.setText(f"target {target}" + (f", draft {draft}" if draft else ""))

    def clear_placement(self) -> None:
        self.runs_on.setText("–")

    def reset(self) -> None:
        """Show no reply."""
        self.show_stored(ReplyFigures())

    def set_baseline(self, tokens_per_second: float | None) -> None:
        self.baseline = tokens_per_second
        self._show()

    def follow(self, figures: ReplyFigures) -> None:
        """Show a streaming reply's figures (the transcript folds events into them; call ``refresh``)."""
        self.figures = figures
        self._live = True
        self._started = time.monotonic()
        self.refresh()

    def show_stored(self, figures: ReplyFigures) -> None:
        """Show a stored reply's figures (no chart)."""
        self.figures = figures
        self._live = False
        self.refresh()

    def refresh(self) -> None:
        """Redraw the figures and the chart after the transcript folded new events."""
        points = self.figures.accepted_per_round
        if self.series.count() != len(points):
            self.series.replace([QPointF(r, a) for r, a in points])
            self._update_axes()
        self._show()

    @property
    def live_tokens_per_second(self) -> float:
        final = self.figures.final
        if final is not None and final.tokens_per_second > 0:
            return final.tokens_per_second
        if not self._live:
            return 0.0  # a stored reply without the engine's figures (cut short): no rate to show
        elapsed = time.monotonic() - self._started
        return self.figures.generated / elapsed if elapsed > 0 else 0.0

    def _update_axes(self) -> None:
        points = self.figures.accepted_per_round
        right = int(max(8, points[-1][0] if points else 0))
        top = int(max([4] + [a for _, a in points]))
        for axis, high in ((self.x_axis, right), (self.y_axis, top)):
            axis.setRange(0, high)
            axis.setTickInterval(max(1, math.ceil(high / 6)))

    def _show(self) -> None:
        f = self.figures
        if f.generated == 0:
            for label in (self.tokens_per_second, self.acceptance, self.mean_accepted, self.depth_value, self.speedup):
                label.setText("–")
            return
        tps = self.live_tokens_per_second
        self.tokens_per_second.setText(f"{tps:.1f}" if tps > 0 else "–")
        self.acceptance.setText(f"{f.acceptance_rate:.0%}" if f.drafted else "n/a (no drafts)")
        self.mean_accepted.setText(f"{f.mean_accepted_per_round:.2f}" if f.rounds else "–")
        self.depth_value.setText(str(f.depth))
        plain_estimate = f.final.plain_tokens_per_second_estimate if f.final else 0.0
        if tps <= 0:
            self.speedup.setText("–")
        elif self.baseline:
            self.speedup.setText(f"×{tps / self.baseline:.2f} (measured)")
        elif plain_estimate > 0:  # the engine's prediction of plain decoding from its verify cost
            self.speedup.setText(f"≈ ×{tps / plain_estimate:.2f} (estimate)")
        else:
            self.speedup.setText(f"≈ ×{estimated_speedup(f.passes, f.drafted, f.generated):.2f} (estimate)")
