"""Take the model picker screenshots in docs/ against a loopback fake hub.

    DISPLAY=:99 python docs/screenshots/take.py        # any X server (Xvfb is fine)

Writes docs/screenshot-picker.png (the Recommended tab: sizes, memory, and the
verdict of a pair already downloaded) and docs/screenshot-download.png (a pair
downloading, its progress bar part-way). Nothing leaves the machine: the hub is
the tests' fake one (tests/support/hubserver.py) serving small GGUF files under
the catalog's real repository names, throttled so the download takes a few
seconds, and every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "tests"))

WIDTH = 1000  # of the picker dialog; PNGs stay small and readable


def isolate(tmp: Path) -> None:
    for name in ("data", "config", "cache", "models"):
        (tmp / name).mkdir()
    os.environ["SPECCHAT_DATA_DIR"] = str(tmp / "data")
    os.environ["SPECCHAT_CONFIG_DIR"] = str(tmp / "config")
    os.environ["SPECCHAT_CACHE_DIR"] = str(tmp / "cache")
    os.environ["SPECCHAT_MODEL_DIRS"] = str(tmp / "models")
    os.environ["HF_HOME"] = str(tmp / "hf")
    os.environ.pop("HF_HUB_CACHE", None)
    os.environ["HF_HUB_OFFLINE"] = "0"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"


def serve_catalog_files(hub, tmp: Path) -> None:  # noqa: ANN001 - FakeHub
    """Tiny stand-ins for two catalog pairs: SmolLM2 (downloaded first) and Qwen3 (downloaded on screen)."""
    from support.gguf_files import write_gguf

    vocab = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"tok{i}" for i in range(2000)]
    files = {
        ("HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF", "smollm2-1.7b-instruct-q4_k_m.gguf"): ("SmolLM2", "1.7B", 262_144),
        ("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "smollm2-135m-instruct-q8_0.gguf"): ("SmolLM2", "135M", 1_024),
        ("unsloth/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf"): ("Qwen3", "8B", 1_048_576),
        ("unsloth/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf"): ("Qwen3", "0.6B", 8_192),
    }
    for (repo, name), (base, size, elements) in files.items():
        path = write_gguf(tmp / "ggufs" / name, tokens=vocab, basename=base, size_label=size, tensor_elements=elements)
        hub.add(repo, name, path.read_bytes())


def main() -> int:
    from support.hubserver import serve

    with tempfile.TemporaryDirectory(prefix="specchat-shots-") as name, serve() as hub:
        tmp = Path(name)
        isolate(tmp)
        os.environ["HF_ENDPOINT"] = hub.url
        serve_catalog_files(hub, tmp)

        from specchat.core.models.download import download_quant

        for repo, quant in (
            ("HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF", "Q4_K_M"),
            ("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "Q8_0"),
        ):
            download_quant(repo, quant)
        hub.throttle = 0.01  # per 8 KiB: the Qwen3 target (4 MiB, read in 1 MiB chunks) takes about five seconds

        from PySide6.QtWidgets import QApplication

        from specchat.core.chat.store import ConversationStore
        from specchat.core.settings import load_settings
        from specchat.ui.main_window import MainWindow

        app = QApplication.instance() or QApplication(sys.argv[:1])
        app.setApplicationName("specchat")

        def wait_until(condition: Callable[[], object], timeout: float = 30.0) -> None:
            end = time.monotonic() + timeout
            while not condition():
                if time.monotonic() > end:
                    raise TimeoutError("the window did not get there in time")
                app.processEvents()
                time.sleep(0.01)

        def settle(seconds: float = 0.3) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                app.processEvents()
                time.sleep(0.01)

        store = ConversationStore()
        window = MainWindow(load_settings(), store)
        window.resize(1200, 760)
        window.show()
        dialog = window.dialogs.model_picker()
        dialog.resize(WIDTH, 400)
        tab = dialog.catalog_tab
        dialog.tabs.setCurrentWidget(tab)
        smol = tab.item_for("smollm2-1.7b")
        wait_until(lambda: smol.text(tab.STATE_COLUMN) not in ("", "checking…"))
        tab.tree.setCurrentItem(smol)
        settle()
        save(dialog.grab(), DOCS / "screenshot-picker.png")

        tab.tree.setCurrentItem(tab.item_for("qwen3-8b"))
        tab.get_button.click()
        wait_until(lambda: "target" in tab.status.text() and 250 <= tab.progress.value() <= 750)
        save(dialog.grab(), DOCS / "screenshot-download.png")
        wait_until(lambda: tab.worker is None)

        dialog.reject()
        window.close()
        settle()
        store.close()
    return 0


def save(pixmap, path: Path) -> None:  # noqa: ANN001 - QPixmap
    if not pixmap.save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    print(f"{path.relative_to(ROOT)}: {pixmap.width()}x{pixmap.height()}, {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    sys.exit(main())
