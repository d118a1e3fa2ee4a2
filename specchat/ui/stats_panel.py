"""Live figures for the current reply, the plain-decoding baseline it is compared with, a per-round chart,
and the conversation's acceptance by draft position (``core/engine/positions.py``), which shows where
deeper drafts stop paying.

The speed-up of a finished reply is its tokens/s over plain decoding's, timed
on this pair right after it at its context length (``core/chat/baseline.py``),
stored with the reply and marked "measured"; it is never recomputed against
another baseline, and a ratio its own rounds could not reach is not shown.
While a reply streams, the latest plain-decoding figure gives an "≈ so far".
No ratio shows before a reply has generated enough tokens for a rate to mean
something. The "Plain decoding" row shows the figure the ratio beside it was
computed from: a finished reply's own probe (as stored, reopened or not), the
pair's newest figure while a reply streams or none is shown.
"""

from __future__ import annotations

import math
import time

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QEvent, QObject, QPointF, Qt, Signal
from PySide6.QtGui import QBrush, QPainter, QPalette, QPen
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QPushButton, QVBoxLayout, QWidget

from specchat.core.chat.baseline import (
    CEILING_SLACK,
    MIN_TOKENS_FOR_RATIO,
    Baseline,
    reply_speedup,
    speedup_ceiling,
)
from specchat.core.chat.transcript import ReplyFigures, Transcript
from specchat.core.engine.positions import position_acceptance
from specchat.core.engine.registry import source_name
from specchat.core.types import RATE_DIGITS, GenerationStats

from . import design
from .reply_footer import first_token_text

DASH = "–"
FALLBACK_ROUNDS = 4  # plain rounds in a row under Auto, with a drafter, that the panel reports as a fallback


class StatsPanel(QGroupBox):
    """Tokens/s against plain decoding, acceptance, depth, timings, context use, and a per-round chart."""

    measure_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("This reply", parent)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.tokens_per_second = QLabel(DASH)
        # Two explicit lines, not word wrap: a wrapped label's height is settled by height-for-width, which
        # the scrolling side panel did not always redo, and the second line overlapped the next row.
        self.plain = QLabel(DASH)
        self.speedup = QLabel(DASH)
        self.acceptance = QLabel(DASH)
        self.mean_accepted = QLabel(DASH)
        self.round_count = QLabel(DASH)
        self.round_count.setToolTip(
            "Target passes of this reply, numbered from 1 as in the chart and the token X-ray; those that checked "
            "drafts are its drafted rounds (Accepted/round is over those)"
        )
        self.depth_value = QLabel(DASH)
        self.depth_value.setWordWrap(True)
        self.first_token = QLabel(DASH)
        self.token_counts = QLabel(DASH)
        self.context_used = QLabel(DASH)
        self.conversation = QLabel(DASH)
        self.conversation.setWordWrap(True)
        self.by_source = QLabel(DASH)
        self.by_source.setWordWrap(True)
        self.by_source.setToolTip("Drafts the target accepted, per source that drafted them, in this reply")
        self.by_origin = QLabel(DASH)
        self.by_origin.setWordWrap(True)
        self.by_origin.setToolTip(
            "Lookup's drafts the target accepted, per text they were drafted from (an attached file, or the "
            "conversation), in this reply"
        )
        self.runs_on = QLabel(DASH)
        self.runs_on.setWordWrap(True)
        self.runs_on.setToolTip("Where each model's layers run (set GPU layers in the Speculation panel)")
        for label, widget in (
            ("Tokens/s", self.tokens_per_second),
            ("Plain decoding", self.plain),
            ("Speed-up", self.speedup),
            ("Acceptance", self.acceptance),
            ("Accepted/round", self.mean_accepted),
            ("Rounds", self.round_count),
            ("By source", self.by_source),
            ("Lookup in", self.by_origin),
            ("Depth", self.depth_value),
            ("First token", self.first_token),
            ("Tokens", self.token_counts),
            ("Context", self.context_used),
            ("Conversation", self.conversation),
            ("Runs on", self.runs_on),
        ):
            form.addRow(label, widget)
        layout.addLayout(form)
        self._form = form
        self._wrapped = [figure for figure in self.findChildren(QLabel) if figure.wordWrap()]
        self._fitted: dict[QLabel, tuple[str, int]] = {}  # per wrapped figure: the text and width it was fitted to
        for figure in self._wrapped:
            figure.installEventFilter(self)
        self.measure_button = QPushButton("Measure plain decoding")
        design.set_icon(self.measure_button, "timer")
        self.measure_button.setToolTip("Time this pair without a drafter again, under the current settings")
        self.measure_button.clicked.connect(lambda *_: self.measure_requested.emit())
        layout.addWidget(self.measure_button)

        self.accepted_series = QLineSeries()
        self.accepted_series.setName("accepted")
        self.depth_series = QLineSeries()
        self.depth_series.setName("depth")
        chart = QChart()
        chart.addSeries(self.depth_series)
        chart.addSeries(self.accepted_series)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignTop)
        chart.setMargins(chart.margins() * 0)
        self.x_axis = QValueAxis()
        self.x_axis.setTitleText("round")
        self.y_axis = QValueAxis()
        self.y_axis.setTitleText("tokens")
        chart.addAxis(self.x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(self.y_axis, Qt.AlignmentFlag.AlignLeft)
        for series in (self.depth_series, self.accepted_series):
            series.attachAxis(self.x_axis)
            series.attachAxis(self.y_axis)
        self.chart_view = QChartView(chart)
        self.chart_view.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.chart_view.setMinimumHeight(170)
        layout.addWidget(self.chart_view, 1)
        self.curve_view = self._curve_chart()
        layout.addWidget(self.curve_view, 1)

        self.baseline: Baseline | None = None
        self.n_ctx = 0
        self.transcript: Transcript | None = None
        self.figures = ReplyFigures()
        self._live = False
        self.auto_drafting = False  # the followed reply drafts under Auto depth (set_auto_drafting)
        self._started = time.monotonic()
        self.reset()
        self._theme_charts()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._theme_charts()

    def _theme_charts(self) -> None:
        """Paint both charts in the panel's palette: they follow the light and dark themes."""
        palette = self.palette()
        base = palette.color(QPalette.ColorRole.Base)
        text = palette.color(QPalette.ColorRole.Text)
        grid = palette.color(QPalette.ColorRole.Mid)
        for view in (self.chart_view, self.curve_view):
            chart = view.chart()
            view.setBackgroundBrush(QBrush(base))
            chart.setBackgroundBrush(QBrush(base))
            chart.setBackgroundPen(QPen(Qt.PenStyle.NoPen))
            chart.setTitleBrush(QBrush(text))
            chart.legend().setLabelColor(text)
            for axis in chart.axes():
                axis.setLabelsColor(text)
                axis.setTitleBrush(QBrush(text))
                axis.setGridLineColor(grid)
                axis.setLinePenColor(grid)

    def _curve_chart(self) -> QChartView:
        """The conversation's acceptance by draft position (``position_acceptance``), 0-100%."""
        self.curve_series = QLineSeries()
        self.curve_series.setPointsVisible(True)
        chart = QChart()
        chart.addSeries(self.curve_series)
        chart.setTitle("Accepted by draft position")
        chart.legend().hide()
        chart.setMargins(chart.margins() * 0)
        self.curve_x = QValueAxis()
        self.curve_x.setTitleText("draft position")
        self.curve_x.setLabelFormat("%d")
        self.curve_x.setTickType(QValueAxis.TickType.TicksDynamic)
        self.curve_x.setTickAnchor(1)
        self.curve_y = QValueAxis()
        self.curve_y.setTitleText("%")
        self.curve_y.setLabelFormat("%d")
        self.curve_y.setRange(0, 100)
        self.curve_y.setTickCount(3)
        chart.addAxis(self.curve_x, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(self.curve_y, Qt.AlignmentFlag.AlignLeft)
        self.curve_series.attachAxis(self.curve_x)
        self.curve_series.attachAxis(self.curve_y)
        view = QChartView(chart)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        view.setMinimumHeight(170)
        self.curve: list[tuple[float, int]] | None = None  # None: not drawn yet, axes unset
        return view

    def _show_curve(self) -> None:
        """Redraw the per-position curve: how often each draft position is accepted once the target reaches it."""
        counts = self.transcript.positions() if self.transcript is not None else self.figures.positions
        curve = position_acceptance(counts)
        if curve == self.curve:
            return
        self.curve = curve
        self.curve_series.replace([QPointF(i + 1, 100.0 * rate) for i, (rate, _) in enumerate(curve)])
        right = max(4, len(curve))
        self.curve_x.setRange(1, right)
        self.curve_x.setTickInterval(max(1, math.ceil(right / 6)))
        self.curve_view.setToolTip(
            "How often draft position i is accepted, of the rounds that reached it (every earlier draft accepted):\n"
            + "\n".join(f"position {i + 1}: {rate:.0%} of {n}" for i, (rate, n) in enumerate(curve))
            if curve
            else "No drafts yet in this conversation"
        )

    # -- what the window tells it ------------------------------------------------------

    def set_placement(self, target: str, draft: str) -> None:
        """Show where the loaded models run, e.g. ``target GPU (all 30 layers), draft CPU``."""
        self.runs_on.setText(f"target {target}" + (f", draft {draft}" if draft else ""))

    def clear_placement(self) -> None:
        self.runs_on.setText(DASH)

    def set_baseline(self, baseline: Baseline | None) -> None:
        """Plain decoding measured on the loaded pair under the current settings (None: not measured)."""
        self.baseline = baseline
        self._show()

    def set_context_size(self, n_ctx: int) -> None:
        self.n_ctx = n_ctx
        self._show()

    def set_transcript(self, transcript: Transcript) -> None:
        """The conversation whose totals the panel shows."""
        self.transcript = transcript
        self._show()

    def reset(self) -> None:
        """Show no reply."""
        self.show_stored(ReplyFigures())

    def follow(self, figures: ReplyFigures) -> None:
        """Show a streaming reply's figures (the transcript folds events into them; call ``refresh``)."""
        self.figures = figures
        self._live = True
        self._started = figures.started  # when the reply (or its continuation) was asked for, even if shown again
        self.refresh()

    def show_stored(self, figures: ReplyFigures) -> None:
        """Show a stored reply's figures and chart."""
        self.figures = figures
        self._live = False
        self.refresh()

    def refresh(self) -> None:
        """Redraw the figures and the chart after the transcript folded new events."""
        rounds = self.figures.per_round
        if self.accepted_series.count() != len(rounds) or not rounds:
            # rounds are numbered from 1 on screen, as in the token X-ray
            self.accepted_series.replace([QPointF(r + 1, a) for r, _, a in rounds])
            self.depth_series.replace([QPointF(r + 1, d) for r, d, _ in rounds])
            right = rounds[-1][0] + 1 if rounds else 0
            top = max([1] + [max(d, a) for _, d, a in rounds])
            set_whole_axis(self.x_axis, 1 if rounds else 0, max(right, 1 if rounds else 4))
            set_whole_axis(self.y_axis, 0, top)
        self._show_curve()
        self._show()

    # -- figures -----------------------------------------------------------------------

    @property
    def live_tokens_per_second(self) -> float:
        final = self.figures.final
        if final is not None and final.tokens_per_second > 0:
            return round(final.tokens_per_second, RATE_DIGITS)  # as stored: the same figure when reopened
        if not self._live:
            return 0.0  # a stored reply without the engine's figures (cut short): no rate to show
        carried = self.figures.carried  # a continuation: the rate of what it generated since it started
        generated = self.figures.generated - (carried.generated if carried is not None else 0)
        f = self.figures
        wait = (
            f.resumed_first_token_seconds + f.resumed_waited_seconds
            if carried is not None
            else f.first_token_seconds + f.waited_seconds
        )
        elapsed = time.monotonic() - self._started - wait
        return generated / elapsed if elapsed > 0 else 0.0

    def speedup_text(self) -> tuple[str, str]:
        """The speed-up label and its tooltip (how it was obtained, or why there is no figure)."""
        f = self.figures
        tps = self.live_tokens_per_second
        if f.generated < MIN_TOKENS_FOR_RATIO or tps <= 0:
            return DASH, f"Shown once the reply has {MIN_TOKENS_FOR_RATIO} tokens: fewer say nothing about a rate."
        if self._ended:  # its own figure, stored with it, or none
            final = f.final
            shown = reply_speedup(f.generated, f.passes, tps, _probe_rate(final), final.plain_tokens if final else 0)
            return shown.text, shown.why
        b = self.baseline
        if b is None or tps / b.tokens_per_second > speedup_ceiling(f.generated, f.passes) * CEILING_SLACK:
            return DASH, "This reply's speed-up is measured when it ends: plain decoding is timed right after it."
        return (
            f"≈×{tps / b.tokens_per_second:.2f} so far",
            f"Against plain decoding's {b.tokens_per_second:.1f} tokens/s timed {b.age()} ({b.tokens} tokens). "
            "When the reply ends, plain decoding is timed right after it, at its context length, and that "
            "figure replaces this one.",
        )

    @property
    def _ended(self) -> bool:
        """The shown reply has ended: its speed-up is its own, against plain decoding timed right after it."""
        return self.figures.generated > 0 and (self.figures.final is not None or not self._live)

    def plain_text(self) -> tuple[str, str]:
        """The "Plain decoding" row and its tooltip: the speed-up's denominator beside it.

        An ended reply's is its own probe (stored with it); otherwise the pair's newest figure.
        """
        b = self.baseline
        newest = f"{b.tokens_per_second:.1f} tok/s, {b.age()}" if b else "not measured"
        if not self._ended:
            return newest, (
                "Plain decoding on this pair under the current settings, the newest figure (the last "
                "reply's probe, or the calibration after loading)"
                if b
                else ""
            )
        final = self.figures.final
        also = f" The newest on this pair under the current settings: {newest}." if b else ""
        rate = _probe_rate(final)
        if final is None or rate <= 0:
            return "not timed after this reply", f"Plain decoding was not timed after this reply.{also}"
        return (
            f"{rate:.1f} tok/s\nright after this reply",
            f"This reply's speed-up is its tokens/s over this figure: plain decoding timed over "
            f"{final.plain_tokens} tokens right after it, at its context length, and stored with it.{also}",
        )

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - a Qt override
        refit = (QEvent.Type.Resize, QEvent.Type.FontChange, QEvent.Type.StyleChange)
        if event.type() in refit and isinstance(watched, QLabel):
            self._fitted.pop(watched, None)  # a new font or style wraps the same text at the same width anew
            self._fit_height(watched)
        return super().eventFilter(watched, event)

    def _show(self) -> None:
        self._show_figures()
        for label in self._wrapped:
            self._fit_height(label)

    def _fit_height(self, label: QLabel) -> None:
        """Hold a wrapped figure at the height its text needs at its width: in the scrolling side panel the form
        can leave a label that grows from one line to three a line short (the Depth row's fallback, clipped).
        Done again only when its text or width changed: the figures are shown again with every streamed batch."""
        fit = (label.text(), label.width())
        if fit[1] <= 0 or self._fitted.get(label) == fit:
            return
        self._fitted[label] = fit
        label.setMinimumHeight(0)  # a label's height for its width counts its minimum height
        label.setMinimumHeight(label.heightForWidth(fit[1]))

    def _show_figures(self) -> None:
        f = self.figures
        text, tip = self.plain_text()
        self.plain.setText(text)
        self.plain.setToolTip(tip)
        totals = self.transcript.totals() if self.transcript is not None else (0, 0, 0.0)
        replies = f"{totals[0]} repl{'y' if totals[0] == 1 else 'ies'}"
        self.conversation.setText(f"{replies}, {totals[1]} tokens" if totals[0] else DASH)
        if f.generated == 0:
            for label in (
                self.tokens_per_second,
                self.speedup,
                self.acceptance,
                self.mean_accepted,
                self.round_count,
                self.depth_value,
                self.first_token,
                self.token_counts,
                self.context_used,
            ):
                label.setText(DASH)
            self.speedup.setToolTip("")
            self._show_sources(f)
            return
        tps = self.live_tokens_per_second
        self.tokens_per_second.setText(f"{tps:.1f}" if tps > 0 else DASH)
        text, tip = self.speedup_text()
        self.speedup.setText(text)
        self.speedup.setToolTip(tip)
        self.acceptance.setText(f"{f.acceptance_rate:.0%}" if f.drafted else "n/a (no drafts)")
        self.mean_accepted.setText(f"{f.mean_accepted_per_round:.2f}" if f.rounds else DASH)
        self.round_count.setText(rounds_text(f))
        self._show_sources(f)
        self.depth_value.setText(self._depth_text(f))
        self.first_token.setText(first_token_text(f) or DASH)
        prompt = f.final.prompt_tokens if f.final else 0
        self.token_counts.setText(f"prompt {prompt}, generated {f.generated}" if prompt else f"generated {f.generated}")
        used = prompt + f.generated if prompt else 0
        self.context_used.setText(f"{used} / {self.n_ctx}" if used and self.n_ctx else DASH)

    def _depth_text(self, f: ReplyFigures) -> str:
        """The last round's depth; while Auto has fallen back to plain decoding, that it has and why."""
        recent = [depth for _, depth, _ in f.per_round[-FALLBACK_ROUNDS:]]
        fallen_back = self._live and self.auto_drafting and len(recent) == FALLBACK_ROUNDS and not any(recent)
        self.depth_value.setToolTip(
            "Auto measured plain decoding faster than drafting on this machine right now, so these rounds decode "
            "plainly; it tries drafting again now and then."
            if fallen_back
            else ""
        )
        return "0: plain decoding, speculation is not paying here right now" if fallen_back else str(f.depth)

    def set_auto_drafting(self, on: bool) -> None:
        """Whether the reply being followed drafts under Auto depth (so depth 0 means Auto fell back)."""
        self.auto_drafting = on
        self._show()

    def _show_sources(self, f: ReplyFigures) -> None:
        """Acceptance per source, shown only when more than one source drafted in this reply."""
        drafted = {name: counts for name, counts in f.by_source.items() if counts[0] > 0}
        shown = len(drafted) > 1
        self._form.setRowVisible(self.by_source, shown)
        self.by_source.setText(
            " · ".join(f"{source_name(name)} {a / d:.0%} of {d}" for name, (d, a) in sorted(drafted.items()))
            if shown
            else DASH
        )
        # Lookup per text: shown once a reply drafted from a text of its own (an attachment), beside the conversation.
        origins = {name: counts for name, counts in f.by_origin.items() if counts[0] > 0}
        named = any(origins)
        self._form.setRowVisible(self.by_origin, named)
        self.by_origin.setText(
            " · ".join(
                f"{name or 'the conversation'} {a / d:.0%} of {d}"
                for name, (d, a) in sorted(origins.items(), key=lambda item: (not item[0], item[0]))
            )
            if named
            else DASH
        )


def rounds_text(f: ReplyFigures) -> str:
    """ "40 (32 drafted)": the reply's target passes, and how many checked drafts when not all did."""
    if not f.passes:
        return DASH
    return f"{f.passes}" if f.rounds == f.passes else f"{f.passes} ({f.rounds} drafted)"


def _probe_rate(final: GenerationStats | None) -> float:
    """Plain decoding timed right after a reply, as stored with it (0: not timed)."""
    return round(final.plain_tokens_per_second, RATE_DIGITS) if final is not None else 0.0


MAX_TICKS = 6  # labelled ticks on a chart axis, at most


def whole_ticks(low: int, high: int) -> tuple[int, int]:
    """An axis from ``low`` to at least ``high`` with whole-number ticks evenly spaced: (its top, the step).

    It ends on ``high`` when a step of at most :data:`MAX_TICKS` ticks divides the span (5 rounds from 1: 1..5
    by 1; 27 rounds: 1, 14, 27), else on the first whole tick past it (0..7: 0..8 by 2).
    """
    span = max(1, high - low)
    step = max(1, math.ceil(span / (MAX_TICKS - 1)))
    for exact in range(step, span // 2 + 1):
        if span % exact == 0:
            return low + span, exact
    return low + step * math.ceil(span / step), step


def set_whole_axis(axis: QValueAxis, low: int, high: int) -> None:
    """Range ``axis`` over ``low``..``high`` (stretched to a whole tick) with whole-number ticks from ``low``."""
    top, step = whole_ticks(low, high)
    axis.setTickType(QValueAxis.TickType.TicksFixed)
    axis.setTickCount((top - low) // step + 1)
    axis.setLabelFormat("%.0f")  # rounded, not cut: a tick computed as 1.9999 reads 2
    axis.setRange(low, top)
