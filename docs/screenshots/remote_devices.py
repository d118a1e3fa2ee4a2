"""Screenshot of File → Remote devices… after Test, against two real ``specchat serve-rpc`` servers.

    Xvfb :95 & DISPLAY=:95 python docs/screenshots/remote_devices.py     # any X server

Two servers listen on free loopback ports and a third entry has nobody
listening; the window opens the dialog, presses Test, and once every server
has answered the screen is taken with ImageMagick's ``import`` and cut to the
dialog, written to docs/screenshots/remote-devices.png. Every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots" / "remote-devices.png"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specchat-remote-shot-"))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)
    ports = [free_port(), free_port()]
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "specchat", "serve-rpc", "--port", str(p), "--threads", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    try:
        for port in ports:
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)

        from PySide6.QtWidgets import QApplication

        from specchat.app import llama_build
        from specchat.core.chat.store import ConversationStore
        from specchat.core.remote import save_servers
        from specchat.core.settings import load_settings
        from specchat.ui.main_window import MainWindow

        save_servers([f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}", f"127.0.0.1:{free_port()}"])
        app = QApplication.instance() or QApplication(sys.argv[:1])
        store = ConversationStore()
        window = MainWindow(load_settings(), store, build=llama_build())
        window.resize(1100, 700)
        window.move(0, 0)
        window.show()
        dialog = window.dialogs.remote_devices()
        dialog.move(250, 120)
        dialog.test()
        end = time.monotonic() + 120
        while dialog.testing and time.monotonic() < end:
            app.processEvents()
            time.sleep(0.05)
        for _ in range(20):
            app.processEvents()
            time.sleep(0.05)
        # No window manager under Xvfb draws the dialog's frame: keep the dialog alone, with a thin border.
        subprocess.run(["import", "-window", "root", str(OUT)], check=True)
        g = dialog.frameGeometry()
        subprocess.run(
            [
                "convert",
                str(OUT),
                "-crop",
                f"{g.width()}x{g.height()}+{g.x()}+{g.y()}",
                "+repage",
                "-bordercolor",
                "#888888",
                "-border",
                "1",
                str(OUT),
            ],
            check=True,
        )
        print(OUT)
        window.close()
        store.close()
        return 0
    finally:
        for server in servers:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
