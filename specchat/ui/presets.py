"""Sampler presets in the settings panel: pick one, save the current sampler as one; each conversation keeps
the sampler it was last used with (in the store) and gets it back when it is opened again."""

from __future__ import annotations

import logging
import sqlite3

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QInputDialog, QLabel, QToolButton, QWidget

from specchat.core.chat.presets import BUILT_IN, CUSTOM, SamplerPreset, user_presets
from specchat.core.chat.store import ConversationStore
from specchat.core.settings import Settings

from . import design
from .controls import SpeculationControls
from .wheel_guard import guard_wheel

log = logging.getLogger(__name__)


class PresetBar(QWidget):
    """ "Preset [Balanced ▾] [Save…]": the presets, and "Custom" while the values match none."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.combo = QComboBox()
        self.combo.setToolTip(
            "Sampler presets: temperature, top-k, top-p and repeat penalty together; each conversation keeps its own"
        )
        self.save_button = QToolButton()
        self.save_button.setText("Save…")
        design.set_icon(self.save_button, "floppy-disk")
        self.save_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.save_button.setToolTip("Save the current sampler settings as a preset")
        layout.addWidget(QLabel("Preset"))
        layout.addWidget(self.combo, 1)
        layout.addWidget(self.save_button)
        guard_wheel(self)  # scrolling the panel over it changes nothing


def _values(controls: SpeculationControls, name: str = CUSTOM) -> SamplerPreset:
    sampler = controls.generation_params().sampler
    return SamplerPreset(name, sampler.temperature, sampler.top_k, sampler.top_p, sampler.repeat_penalty)


class PresetKeeper(QObject):
    """Applies presets to the sampler controls and keeps the open conversation's sampler in the store."""

    def __init__(
        self,
        bar: PresetBar,
        controls: SpeculationControls,
        store: ConversationStore,
        settings: Settings,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.bar, self.controls, self.store, self.settings = bar, controls, store, settings
        self.conversation_id: int | None = None
        self._applying = False
        self._fill()
        bar.combo.activated.connect(self._chosen)
        bar.save_button.clicked.connect(self.save_current)
        for box in (controls.temperature, controls.top_k, controls.top_p, controls.repeat_penalty):
            box.valueChanged.connect(self._edited)

    def presets(self) -> list[SamplerPreset]:
        return [*BUILT_IN, *user_presets(self.settings.presets)]

    def current(self) -> SamplerPreset:
        """The controls' sampler, named after the preset it matches (else ``CUSTOM``)."""
        values = _values(self.controls)
        return next((p for p in self.presets() if p.same_values(values)), values)

    def _fill(self) -> None:
        combo = self.bar.combo
        combo.blockSignals(True)
        combo.clear()
        for preset in self.presets():
            combo.addItem(preset.name, preset)
            combo.setItemData(combo.count() - 1, _describe(preset), Qt.ItemDataRole.ToolTipRole)
        combo.addItem(CUSTOM, None)
        combo.blockSignals(False)
        self._show_name()

    def _show_name(self) -> None:
        row = self.bar.combo.findText(self.current().name)
        self.bar.combo.setCurrentIndex(row if row >= 0 else self.bar.combo.count() - 1)

    def apply(self, preset: SamplerPreset) -> None:
        """Set the sampler controls to ``preset`` (and keep it with the open conversation)."""
        self._applying = True
        try:
            c = self.controls
            c.temperature.setValue(preset.temperature)
            c.top_k.setValue(preset.top_k)
            c.top_p.setValue(preset.top_p)
            c.repeat_penalty.setValue(preset.repeat_penalty)
        finally:
            self._applying = False
        self._show_name()
        self._keep()

    def _chosen(self, row: int) -> None:
        preset = self.bar.combo.itemData(row)
        if isinstance(preset, SamplerPreset):
            self.apply(preset)
        else:
            self._show_name()  # "Custom" is what the values say, not a choice

    def _edited(self) -> None:
        if not self._applying:
            self._show_name()
            self._keep()

    def show_conversation(self, conversation_id: int | None) -> None:
        """A conversation is on screen: its kept sampler comes back (one with none keeps the controls' values)."""
        self.conversation_id = conversation_id
        kept = None
        if conversation_id is not None:
            try:
                kept = self.store.sampler(conversation_id)
            except sqlite3.Error as exc:
                log.warning("could not read the conversation's sampler: %s", exc)
        if kept is not None and not kept.same_values(_values(self.controls)):
            self.apply(kept)
        self._show_name()

    def keep_for(self, conversation_id: int | None) -> None:
        """A reply starts in ``conversation_id`` (perhaps just made by its first message): keep the sampler it uses."""
        self.conversation_id = conversation_id
        self._keep()

    def _keep(self) -> None:
        if self.conversation_id is None:
            return
        try:
            self.store.set_sampler(self.conversation_id, self.current())
        except sqlite3.Error as exc:
            log.warning("could not keep the conversation's sampler: %s", exc)

    def save_current(self) -> QInputDialog:
        """Ask for a name and save the current sampler under it (the dialog is returned for tests)."""
        dialog = QInputDialog(self.bar.window())
        dialog.setWindowTitle("Save preset")
        dialog.setLabelText(f"Name for {_describe(_values(self.controls))}:")
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.textValueSelected.connect(self.save_as)
        dialog.open()
        return dialog

    def save_as(self, name: str) -> None:
        """Save the current sampler as the user's preset ``name`` (a built-in name, or none, is refused)."""
        name = " ".join(name.split())[:80]
        if not name or name == CUSTOM or name in {p.name for p in BUILT_IN}:
            return
        self.settings.presets = {**self.settings.presets, name: _values(self.controls, name).as_dict()}
        self._fill()
        self._keep()


def _describe(p: SamplerPreset) -> str:
    return (
        f"temperature {p.temperature:g}, top-k {p.top_k or 'off'}, top-p {p.top_p:g}, "
        f"repeat penalty {p.repeat_penalty:g}"
    )
