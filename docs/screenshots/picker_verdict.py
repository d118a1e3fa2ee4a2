"""Screenshots of the model picker's Files tab while the pair is checked, and with the verdict in.

    Xvfb :91 & DISPLAY=:91 python docs/screenshots/picker_verdict.py

The pair is the random-weight test target (tests/models/llama.gguf) and its Q8 copy as the draft. The first
shot holds the verdict thread on an Event so that *Checking the pair…* is on screen however fast this
machine reads the files; the second is taken once the real verdict is in.
Writes docs/screenshots/picker-checking.png and docs/screenshots/picker-verdict.png.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots"


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specchat-picker-"))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)
    os.environ["HF_HOME"] = str(tmp / "hf")
    os.environ["SPECCHAT_MODEL_DIRS"] = str(tmp / "none")

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from specchat.core.models.fit import MachineMemory
    from specchat.core.models.pair_facts import PairFacts, PairQuestion, pair_facts
    from specchat.ui.model_picker import ModelPickerDialog
    from specchat.ui.pair_verdicts import PairVerdicts

    app = QApplication(sys.argv[:1])
    gate = threading.Event()

    def held(question: PairQuestion) -> PairFacts:
        gate.wait(60)
        return pair_facts(question)

    def settle(ms: int = 300) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    verdicts = PairVerdicts(held)
    models = ROOT / "tests" / "models"
    picker = ModelPickerDialog(
        str(models / "llama.gguf"),
        str(models / "llama-q8.gguf"),
        memory=MachineMemory(ram_free=16 * 10**9, gpu_free=0),
        verdicts=verdicts,
    )
    picker.resize(880, 420)
    picker.show()
    settle()
    picker.grab().save(str(OUT / "picker-checking.png"))
    gate.set()
    while picker.checking:
        settle(50)
    settle()
    picker.grab().save(str(OUT / "picker-verdict.png"))
    picker.done(0)
    verdicts.stop(10)
    del app
    print(OUT / "picker-checking.png", OUT / "picker-verdict.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
