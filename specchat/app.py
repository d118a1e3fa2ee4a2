"""Composition root of the desktop app: settings, store, engine thread and main window."""

from __future__ import annotations

import argparse
import logging
import sys

from specchat import __version__
from specchat.core import paths

log = logging.getLogger(__name__)


def run_gui(args: argparse.Namespace) -> int:
    """Open the window; ``--demo`` loads the offline demo pair, ``--target/--draft`` load those files."""
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from specchat.core.chat.store import ConversationStore
    from specchat.core.runtime.build import llama_build
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("specchat")
    app.setApplicationVersion(__version__)
    app.setOrganizationName("specchat")
    icon = paths.resources_dir() / "icons" / "specchat.svg"
    if icon.is_file():
        QApplication.setWindowIcon(QIcon(str(icon)))

    settings = load_settings()
    store = ConversationStore()
    window = MainWindow(settings, store, build=llama_build())
    window.show()
    if getattr(args, "demo", False):
        window.loader.load_demo()
    elif getattr(args, "target", None):
        window.load_models(args.target, getattr(args, "draft", None))
    try:
        return int(app.exec())
    finally:
        window.close()  # idempotent: cancels, joins the engine thread, saves settings
        store.close()
