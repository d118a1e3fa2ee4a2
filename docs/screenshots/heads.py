"""Screenshots of heads beside a target: the model picker's Files tab and the draft finder.

    Xvfb :97 & DISPLAY=:97 python docs/screenshots/heads.py

A temporary folder holds the random-weight test target (tests/models/llama.gguf)
with two head files beside it, written by tests/support/heads.py: an EAGLE-3 head
that fits and a DFlash drafter trained for a deeper model. The draft finder runs
for real on this machine (20 s budget): the heads are listed, and its calibration
gives this machine's verdict. The picker is then shown with a verdict from a
*constructed* calibration, as on a Metal machine where an 8-token verify costs
6.5 one-token passes, to show what the picker says there (this machine is a CPU).
Writes docs/screenshots/heads-picker.png and docs/screenshots/heads-finder.png.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots"
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specchat-heads-"))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)
    os.environ["HF_HOME"] = str(tmp / "hf")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from specchat.core.advise import payoff
    from specchat.core.advise.advisor import advise
    from specchat.core.advise.calibrate import RoundSample
    from specchat.ui.draft_finder import DraftFinderDialog
    from specchat.ui.model_picker import ModelPickerDialog
    from support.heads import write_head

    app = QApplication(sys.argv[:1])
    folder = tmp / "models"
    folder.mkdir()
    target = folder / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    shutil.copy(ROOT / "tests" / "models" / "llama.gguf", target)
    write_head(folder / "eagle3-Llama-3.1-8B-Instruct-Q8_0.gguf", target, "eagle3", base_model="Llama 3.1 8B Instruct")
    write_head(
        folder / "dflash-Llama-3.1-70B-Q8_0.gguf",
        target,
        "dflash",
        layers=[1, 40, 79],
        base_model="Llama 3.1 70B Instruct",
    )

    def settle(ms: int = 300) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    advice = advise(target, budget_seconds=20, library=False, catalog=False, max_tokens=24)
    finder = DraftFinderDialog(str(target))
    finder.resize(1000, 420)
    finder.show()
    finder.show_advice(advice)
    finder.progress_bar.setValue(100)
    settle()
    finder.grab().save(str(OUT / "heads-finder.png"))
    finder.close()

    slope = (6.5 - 1) / 7
    metal = payoff.verify_scaling([RoundSample(d, d, 0, 0.02 * (1 + d * slope)) for d in range(9)])
    assert metal is not None
    payoff.remember(target, payoff.payoff(metal))
    picker = ModelPickerDialog(str(target), "")
    picker.resize(900, 420)
    picker.show()
    while picker.checking:  # the verdict thread reads the heads
        settle(50)
    picker.heads_box.setCurrentIndex(1)
    picker._use_head()
    while picker.checking:
        settle(50)
    settle()
    picker.grab().save(str(OUT / "heads-picker.png"))
    picker.done(0)
    del app
    print(OUT / "heads-finder.png", OUT / "heads-picker.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
