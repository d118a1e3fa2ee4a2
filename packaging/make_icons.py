"""Render the app icon (resources/icons/specchat.svg) to PNG, ICO and ICNS in packaging/icons/.

Run from anywhere with a Python that has PySide6:
    python packaging/make_icons.py
The outputs are committed, so building the app does not need this step.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QImageWriter, QPainter
from PySide6.QtSvg import QSvgRenderer

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "resources" / "icons" / "specchat.svg"
OUT = ROOT / "packaging" / "icons"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def render(renderer: QSvgRenderer, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 - painting needs it
    renderer = QSvgRenderer(str(SOURCE))
    if not renderer.isValid():
        print(f"cannot read {SOURCE}", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    images = {}
    for size in SIZES:
        images[size] = render(renderer, size)
        path = OUT / f"specchat-{size}.png"
        if not images[size].save(str(path)):
            print(f"could not write {path}", file=sys.stderr)
            return 1
        print(path.relative_to(ROOT))
    formats = {bytes(f).decode() for f in QImageWriter.supportedImageFormats()}
    for fmt, size in (("ico", 256), ("icns", 512)):
        if fmt in formats:
            path = OUT / f"specchat.{fmt}"
            if images[size].save(str(path), fmt):
                print(path.relative_to(ROOT))
        else:
            print(f"Qt cannot write .{fmt} here; skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
