"""The draft finder's pick in the window: applied on its pair, held until undone or another pair loads."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QPushButton, QStatusBar

from specchat.core.engine.registry import drafter_entry
from specchat.core.settings import Settings

from .controls import SpeculationControls
from .draft_finder import DrafterSetup, FinderChoice
from .pair_loading import PairLoader
from .worker import ModelInfo


class FinderPick(QObject):
    """ "Use this" from the draft finder or the picker, its Undo button, and what the saved settings keep."""

    def __init__(
        self,
        loader: PairLoader,
        controls: SpeculationControls,
        status: QStatusBar,
        streaming: Callable[[], bool],
        notice: Callable[[str], None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.loader, self.controls, self.status = loader, controls, status
        self.streaming, self.notice = streaming, notice
        self.choice: FinderChoice | None = None  # the finder's pick while it holds
        self._on_load: DrafterSetup | None = None  # applied once its own pair has loaded
        self.undo_button = QPushButton("Undo the draft finder's choice")
        self.undo_button.hide()
        self.undo_button.clicked.connect(self.undo)
        status.addPermanentWidget(self.undo_button)

    def use(self, target: str, draft: str, drafter: str, depth: int) -> None:
        """Use the draft finder's pick: its drafter at its best fixed depth, on its pair (loaded first unless it
        is the loaded one). It holds for that pair: "Undo" in the status bar, or loading another pair, brings
        back the drafter, depth and Auto set before, and the saved settings keep those (:meth:`keep_yours`)."""
        if self.streaming():
            self.notice("stop the reply before using the draft finder's choice")
            return
        pick = DrafterSetup(target, draft, drafter_entry(drafter).key, depth, auto=False)
        before = self.choice.before if self.choice is not None else self._setup()
        self.choice = FinderChoice(before, pick)
        self.undo_button.show()
        self._set_up(pick)

    def undo(self) -> None:
        """Bring back the pair, drafter, depth and Auto from before the draft finder's choice."""
        if self.choice is None or self.streaming() or self.loader.loading:
            return
        before, self.choice = self.choice.before, None
        self.undo_button.hide()
        self._set_up(before)

    def keep_yours(self, s: Settings) -> None:
        """The finder's pick holds for its pair in this run only: the saved settings keep the choice before it."""
        if self.choice is not None and self.choice.applied.same_settings(self._setup()):
            before = self.choice.before
            s.drafter, s.depth = before.drafter, None if before.auto else before.depth

    def _setup(self) -> DrafterSetup:
        info = self.loader.info
        return DrafterSetup.of(self.controls, info.target_path if info else "", info.draft_path if info else "")

    def _set_up(self, setup: DrafterSetup) -> None:
        """``setup`` now if its pair is the loaded one, else once its pair has loaded."""
        info = self.loader.info
        if not setup.target or (info is not None and setup.same_pair(info.target_path, info.draft_path)):
            self._on_load = None
            setup.apply(self.controls)
            self.status.showMessage(f"Drafting with {setup.describe(self.controls)}", 8000)
        else:
            self._on_load = setup
            self.loader.load(setup.target, setup.draft or None)

    def pair_loaded(self, info: ModelInfo) -> None:
        """Apply a pick (or its undo) waiting for this pair; a finder's pick ends when another pair loads."""
        waiting, self._on_load = self._on_load, None
        if waiting is not None and waiting.same_pair(info.target_path, info.draft_path):
            waiting.apply(self.controls)
            self.status.showMessage(f"Drafting with {waiting.describe(self.controls)}", 8000)
            return
        choice = self.choice
        if choice is None or choice.applied.same_pair(info.target_path, info.draft_path):
            return
        self.choice = None
        self.undo_button.hide()
        if choice.applied.same_settings(self._setup()):  # not changed by hand since
            choice.before.apply(self.controls)
            self.controls.set_offered(info.offered)
            self.status.showMessage(
                f"The draft finder's choice was for another pair: back to {choice.before.describe(self.controls)}", 8000
            )
