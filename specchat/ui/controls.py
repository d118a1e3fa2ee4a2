"""Speculation and sampler controls: depth (or auto), drafter, sampler, max tokens, context size, GPU layers."""

from __future__ import annotations

from collections.abc import Collection
from typing import cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QMouseEvent, QStandardItemModel, QValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QWidget,
)
from superqt import QLabeledSlider

from specchat.core.chat.baseline import PROBE_TOKENS
from specchat.core.engine.registry import (
    Part,
    default_drafter,
    drafter_entries,
    drafter_entry,
    drafter_names,
    resolve,
)
from specchat.core.settings import MAX_CONTEXT, MIN_CONTEXT, Settings
from specchat.core.types import (
    GPU_LAYERS_AUTO,
    MAX_DEPTH,
    MAX_GPU_LAYERS,
    GenerationParams,
    GpuLayers,
    SamplerParams,
    SpecchatError,
    parse_gpu_layers,
)

from .wheel_guard import guard_wheel

LOOKUP_MEMORY_TEXT = "Remember phrasing from saved conversations for lookup drafting"
READ_AHEAD_TEXT = "Read the prompt while I type"


def _check_row(text: str, tooltip: str) -> tuple[QCheckBox, QWidget]:
    """A check box with ``text`` as a wrapping label beside it that toggles it (a check box cannot wrap its own
    text), both with ``tooltip``: the box, and the row holding the two."""
    box = QCheckBox()
    box.setAccessibleName(text)
    label = ClickableLabel(text)
    label.setWordWrap(True)
    label.clicked.connect(box.toggle)
    for widget in (box, label):
        widget.setToolTip(tooltip)
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(box, 0, Qt.AlignmentFlag.AlignTop)
    layout.addWidget(label, 1)
    return box, row


class ClickableLabel(QLabel):
    """A label that says when it is clicked (the words of a check box that wraps them)."""

    clicked = Signal()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        super().mouseReleaseEvent(event)


class ContextSizeBox(QSpinBox):
    """Context length in tokens; the arrows double and halve it (4096 -> 8192), typing sets any value."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setRange(MIN_CONTEXT, MAX_CONTEXT)
        self.setSuffix(" tokens")
        self.setToolTip(
            "Tokens a conversation can hold, prompt and replies together. Longer contexts need more memory "
            "(the model picker's Memory line shows how much). Applies on the next load; the engine caps it at "
            "what the target was trained for."
        )

    def stepBy(self, steps: int) -> None:
        self.setValue(int(min(MAX_CONTEXT, max(MIN_CONTEXT, self.value() * 2.0**steps))))


class GpuLayersBox(QSpinBox):
    """A layer count with two words below 0: "auto" (fit free memory) and "all" (-1)."""

    AUTO_VALUE = -2
    _WORDS = {AUTO_VALUE: GPU_LAYERS_AUTO, -1: "all"}

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setRange(self.AUTO_VALUE, MAX_GPU_LAYERS)

    def textFromValue(self, value: int) -> str:
        return self._WORDS.get(value, str(value))

    def valueFromText(self, text: str) -> int:
        layers = self._parse(text)
        return self.AUTO_VALUE if layers == GPU_LAYERS_AUTO else int(layers) if layers is not None else self.value()

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        if self._parse(text) is not None:
            return QValidator.State.Acceptable, text, pos
        if any(word.startswith(text.strip().lower()) for word in self._WORDS.values()) or text.strip() in ("", "-"):
            return QValidator.State.Intermediate, text, pos
        return QValidator.State.Invalid, text, pos

    @staticmethod
    def _parse(text: str) -> GpuLayers | None:
        try:
            return parse_gpu_layers(text)
        except SpecchatError:
            return None

    def layers(self) -> GpuLayers:
        """The setting: ``"auto"``, -1 (all) or a count."""
        value = self.value()
        return GPU_LAYERS_AUTO if value == self.AUTO_VALUE else value

    def set_layers(self, layers: GpuLayers) -> None:
        self.setValue(self.AUTO_VALUE if layers == GPU_LAYERS_AUTO else int(layers))


class SpeculationControls(QGroupBox):
    """Always-visible knobs. ``depth_changed`` carries an int or None (auto)."""

    depth_changed = Signal(object)
    lookup_memory_changed = Signal(bool)
    read_ahead_changed = Signal(bool)
    load_setting_changed = Signal()  # context size or GPU layers: they take effect on the next load

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, offload: bool = False) -> None:
        super().__init__("Speculation", parent)
        form = QFormLayout(self)
        self.offload = offload  # whether this llama.cpp build can put layers on a GPU

        self.depth_slider = QLabeledSlider(Qt.Orientation.Horizontal)
        self.depth_slider.setRange(0, MAX_DEPTH)
        self.depth_slider.setToolTip("Tokens the drafter guesses per round (0 = plain decoding)")
        self.auto_depth = QCheckBox("Auto")
        self.auto_depth.setToolTip("Let the adaptive controller pick the depth each round")
        row = QWidget()
        row_layout = QHBoxLayout(row)
        row_layout.setContentsMargins(0, 0, 0, 0)
        row_layout.addWidget(self.depth_slider, 1)
        row_layout.addWidget(self.auto_depth)
        form.addRow("Depth", row)

        self.drafter = QComboBox()
        for entry in drafter_entries():
            self.drafter.addItem(entry.label_for(), entry.key)
        # Sized for a short label, not the longest: the panel stays narrow enough for a 900-pixel window.
        self.drafter.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.drafter.setMinimumContentsLength(14)
        # The closed box may cut the label short; the open list and the tooltip show it whole.
        self.drafter.view().setMinimumWidth(self.drafter.view().sizeHintForColumn(0) + 24)
        self.drafter.currentTextChanged.connect(self.drafter.setToolTip)
        self.drafter.setToolTip(self.drafter.currentText())
        # On a row of its own, the panel's whole width: "Automatic (lookup + draft model)" shows whole.
        form.addRow(QLabel("Drafter"))
        form.addRow(self.drafter)
        # A check box cannot wrap its text, and the panel stays narrow: the words are a label beside it.
        self.lookup_memory, memory_row = _check_row(
            LOOKUP_MEMORY_TEXT,
            "The automatic drafter's lookup also searches your saved conversations, so text you often get "
            "(code idioms, letter formulas) is drafted for free. Kept in a file next to the chats; turning "
            "this off deletes that file (never a conversation). Off by default.",
        )
        form.addRow("", memory_row)
        self.read_ahead, read_ahead_row = _check_row(
            READ_AHEAD_TEXT,
            "While you write and no reply runs, the models read the conversation and your message so far, "
            "so Send starts the reply without reading a long message first. It stops the moment you send, "
            "and uses the processor only while the window is otherwise idle. On by default.",
        )
        form.addRow("", read_ahead_row)

        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setToolTip("0 = greedy")
        form.addRow("Temperature", self.temperature)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setToolTip("0 = off")
        form.addRow("Top-k", self.top_k)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        form.addRow("Top-p", self.top_p)
        self.repeat_penalty = QDoubleSpinBox()
        self.repeat_penalty.setRange(1.0, 2.0)
        self.repeat_penalty.setSingleStep(0.05)
        self.repeat_penalty.setToolTip("Penalise tokens used in the last 64 (1 = off); keeps small models out of loops")
        form.addRow("Repeat penalty", self.repeat_penalty)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 32768)
        form.addRow("Max tokens", self.max_tokens)

        self.context_size = ContextSizeBox()
        form.addRow("Context", self.context_size)

        # GPU layers only mean something when this llama.cpp build can offload.
        self.target_gpu_layers = self._gpu_layers_box("target")
        self.draft_gpu_layers = self._gpu_layers_box("draft")
        if self.offload:
            form.addRow("Target GPU layers", self.target_gpu_layers)
            form.addRow("Draft GPU layers", self.draft_gpu_layers)

        self.apply_settings(settings)
        self.depth_slider.valueChanged.connect(self._emit_depth)
        for box in (self.context_size, self.target_gpu_layers, self.draft_gpu_layers):
            box.valueChanged.connect(lambda _value: self.load_setting_changed.emit())
        self.auto_depth.toggled.connect(self._auto_toggled)
        self.lookup_memory.toggled.connect(self.lookup_memory_changed)
        self.read_ahead.toggled.connect(self.read_ahead_changed)
        guard_wheel(self)  # the panel scrolls under the wheel; a field changes only once clicked into

    def apply_settings(self, s: Settings) -> None:
        self.depth_slider.setValue(4 if s.depth is None else s.depth)
        self.auto_depth.setChecked(s.depth is None)
        self.depth_slider.setEnabled(s.depth is not None)
        self.drafter.setCurrentIndex(drafter_names().index(drafter_entry(s.drafter).name))
        self.lookup_memory.setChecked(s.lookup_memory)
        self.read_ahead.setChecked(s.read_ahead)
        self.temperature.setValue(s.temperature)
        self.top_k.setValue(s.top_k)
        self.top_p.setValue(s.top_p)
        self.repeat_penalty.setValue(s.repeat_penalty)
        self.max_tokens.setValue(s.max_tokens)
        self.context_size.setValue(s.n_ctx)
        self.target_gpu_layers.set_layers(s.target_gpu_layers)
        self.draft_gpu_layers.set_layers(s.draft_gpu_layers)

    def store_settings(self, s: Settings) -> None:
        s.depth = self.chosen_depth
        s.drafter = self.drafter_kind
        s.lookup_memory = self.lookup_memory.isChecked()
        s.read_ahead = self.read_ahead.isChecked()
        s.temperature = self.temperature.value()
        s.top_k = self.top_k.value()
        s.top_p = self.top_p.value()
        s.repeat_penalty = round(self.repeat_penalty.value(), 3)
        s.max_tokens = self.max_tokens.value()
        s.n_ctx = self.context_size.value()
        s.target_gpu_layers = self.target_gpu_layers.layers()
        s.draft_gpu_layers = self.draft_gpu_layers.layers()

    def _gpu_layers_box(self, which: str) -> GpuLayersBox:
        box = GpuLayersBox(self)  # parented even when hidden (a build that cannot offload lays it out nowhere)
        box.setToolTip(
            f"Layers of the {which} model to put on the GPU: auto fits both models into free GPU memory "
            "(draft first), all, or a number (0 = CPU only). Applies on the next load."
        )
        box.setVisible(self.offload)
        return box

    @property
    def chosen_depth(self) -> int | None:
        """The fixed depth picked, or None for auto."""
        return None if self.auto_depth.isChecked() else int(self.depth_slider.value())

    def set_available_drafters(self, draft_model: bool, mtp: bool) -> None:
        """:meth:`set_offered` for a pair with (or without) a draft model and MTP heads."""
        self.set_offered(
            {part.value for part, present in ((Part.DRAFT_MODEL, draft_model), (Part.MTP_HEADS, mtp)) if present}
        )

    def set_offered(self, offered: Collection[str]) -> None:
        """Grey out drafters needing parts the loaded pair lacks; label each after the part it drafts with.

        A drafter the pair cannot run gives way to what its name means on the pair (``"draft"`` with a head
        loaded: the head's own drafter, :func:`~specchat.core.engine.registry.resolve`), else to the registry's
        default for the pair (the automatic one where a model can draft, n-gram lookup where none can).
        """
        model = self._drafter_items()
        for row, entry in enumerate(drafter_entries()):
            usable = entry.available(offered)
            item = model.item(row)
            item.setEnabled(usable)
            self.drafter.setItemText(row, entry.label_for(offered))
            # a greyed-out entry says what would enable it (the open list shows item tooltips)
            hint = "" if usable else f"Not available with this pair: {entry.enable_hint()}"
            item.setToolTip(hint)
            item.setStatusTip(hint)
        self.drafter.setToolTip(self.drafter.currentText())
        if not model.item(self.drafter.currentIndex()).isEnabled():
            meant = resolve(self.drafter.currentData(), offered)
            chosen = meant if meant.available(offered) else default_drafter(offered)
            self.drafter.setCurrentIndex(drafter_names().index(chosen.key))

    def _drafter_items(self) -> QStandardItemModel:
        # a QComboBox's own model is a QStandardItemModel; its items can be greyed out one by one
        return cast(QStandardItemModel, self.drafter.model())

    @property
    def drafter_kind(self) -> str:
        """The chosen drafter's name (:data:`specchat.core.engine.registry.DRAFTERS`)."""
        return drafter_entry(self.drafter.currentData()).name

    def generation_params(self) -> GenerationParams:
        sampler = SamplerParams(
            temperature=round(self.temperature.value(), 3),
            top_k=self.top_k.value(),
            top_p=round(self.top_p.value(), 3),
            repeat_penalty=round(self.repeat_penalty.value(), 3),
        )
        return GenerationParams(sampler=sampler, max_tokens=self.max_tokens.value(), plain_probe=PROBE_TOKENS)

    def show_live_depth(self, depth: int) -> None:
        """While Auto drives it, the (disabled) slider shows the depth the controller chose."""
        if self.auto_depth.isChecked():
            self.depth_slider.blockSignals(True)
            self.depth_slider.setValue(depth)
            self.depth_slider.blockSignals(False)

    def _auto_toggled(self, checked: bool) -> None:
        self.depth_slider.setEnabled(not checked)
        self._emit_depth()

    def _emit_depth(self) -> None:
        self.depth_changed.emit(self.chosen_depth)
