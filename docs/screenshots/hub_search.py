"""Screenshots of the model picker's Search the hub tab, light and dark, at 900x600 and 1600x1000.

    Xvfb :93 -screen 0 1600x1000x24 & DISPLAY=:93 python docs/screenshots/hub_search.py

The hub is the tests' loopback hub (tests/support/hubserver.py) stocked by
tests/support/hub_models.py with real tiny GGUF files: a "Tiny" family's 1B
target in three quantisations (one split in two parts), its 100M draft and a
50M model of another vocabulary. The picker is opened with the 1B Q4_K_M as the
loaded target, on a machine said to have 16 GB of free RAM. Two shots per theme
and size: the search results with the target's files, verdicts and the draft
offered beside it; and the draft's repository judged as drafts for the loaded
target, with a download held part-way (the hub sends 64 KiB, then waits).
Writes docs/screenshots/hub-{results,download}-{light,dark}-{900x600,1600x1000}.png.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specchat-hub-shots-"))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)
    os.environ["HF_HOME"] = str(tmp / "hf")

    from shots import app, settle, wait

    from specchat.core.models.fit import MachineMemory
    from specchat.ui.model_picker import ModelPickerDialog
    from specchat.ui.theme import apply_theme
    from support.gguf_files import GgufMaker
    from support.hub_models import DRAFT_REPO, TARGET_REPO, stock
    from support.hubserver import serve

    qt = app()
    with serve() as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        stocked = stock(hub, GgufMaker(tmp / "ggufs"), target_elements=1024 * 1024)
        for theme in ("light", "dark"):
            apply_theme(theme)
            for width, height in ((900, 600), (1600, 1000)):
                hub.hold_after = None
                hub.release.set()
                size = f"{width}x{height}"
                dialog = ModelPickerDialog(
                    str(stocked.target), "", memory=MachineMemory(ram_free=16 * 10**9, gpu_free=0), n_ctx=4096
                )
                dialog.resize(width, height)
                dialog.show()
                tab = dialog.hub_tab
                dialog.tabs.setCurrentWidget(tab)
                tab.query.setText("tiny")
                wait(tab.searched, 30_000)

                def choose(repo: str, tab: object = tab) -> None:
                    results = tab.results  # type: ignore[attr-defined]
                    for i in range(results.topLevelItemCount()):
                        if results.topLevelItem(i).text(0) == repo:
                            results.setCurrentItem(results.topLevelItem(i))

                choose(TARGET_REPO)
                wait(tab.offered, 30_000)
                settle()
                dialog.grab().save(str(OUT / f"hub-results-{theme}-{size}.png"))

                choose(DRAFT_REPO)
                wait(tab.listed, 30_000)
                tab.files.setCurrentItem(tab.files.topLevelItem(1))
                hub.release.clear()
                hub.hold_after = 2048  # the draft's GET sends this much, then waits: the bar stays part-way
                tab.download_button.click()
                wait(tab.progressed, 30_000)
                settle(600)
                dialog.grab().save(str(OUT / f"hub-download-{theme}-{size}.png"))
                hub.release.set()
                wait(tab.pair_downloaded, 30_000)
                dialog.close()
                # the next round downloads again: start from an empty cache
                for path in (tmp / "hf").rglob("*"):
                    if path.is_file() or path.is_symlink():
                        path.unlink()
        del qt
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
