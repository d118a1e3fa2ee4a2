"""The picker's verdict thread: the GUI thread stays free, a burst of paths gets one verdict, a closed picker
gets none (real widgets offscreen, real GGUF files; the thread's work is held on an Event, never timed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, QTimer
from pytestqt.qtbot import QtBot

from specchat.core.models.fit import MachineMemory
from specchat.core.models.pair_facts import PairFacts, PairQuestion, pair_facts
from specchat.ui.model_picker import CHECKING, ModelPickerDialog
from specchat.ui.pair_verdicts import PairVerdicts
from support.gguf_files import GgufMaker
from support.picker import VERDICT_TIMEOUT_MS, assert_quiet, verdict_in

WAIT_S = VERDICT_TIMEOUT_MS / 1000
MEMORY = MachineMemory(ram_free=16 * 10**9, gpu_free=0)


class GatedJudge:
    """The real judge, holding every question on ``gate`` until the test sets it; records what it was asked."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.asked: list[PairQuestion] = []

    def __call__(self, question: PairQuestion) -> PairFacts:
        self.asked.append(question)
        self.started.set()
        assert self.gate.wait(WAIT_S)
        return pair_facts(question)


Gated = tuple[GatedJudge, PairVerdicts]


@pytest.fixture
def gated() -> Iterator[Gated]:
    judge = GatedJudge()
    verdicts = PairVerdicts(judge)
    yield judge, verdicts
    judge.gate.set()
    assert verdicts.stop(WAIT_S)


def test_the_gui_stays_free_and_a_burst_of_paths_gets_one_verdict_for_the_last(
    qtbot: QtBot, make_gguf: GgufMaker, gated: Gated
) -> None:
    judge, verdicts = gated
    target = make_gguf("target.gguf", tensor_elements=8192)
    drafts = [make_gguf(f"draft{i}.gguf") for i in range(4)]
    drafts.append(make_gguf("stranger.gguf", tokens=[*make_gguf.base_vocab[:-1], "changed"]))
    dialog = ModelPickerDialog(str(target), "", n_ctx=2048, memory=MEMORY, verdicts=verdicts)
    qtbot.addWidget(dialog)
    shown: list[tuple[str, str]] = []
    dialog.verdict_shown.connect(lambda: shown.append((dialog.draft_field.path, dialog.verdict.text())))
    dialog.show()
    assert judge.started.wait(WAIT_S)  # the verdict thread holds the first question
    assert dialog.checking and dialog.verdict.text() == CHECKING
    assert dialog.load_button.isEnabled()  # loading does its own checks: it need not wait

    ticks: list[int] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(1)
    qtbot.waitUntil(lambda: len(ticks) >= 5)  # the GUI thread runs its event loop meanwhile
    timer.stop()
    for draft in drafts:  # five paths, one after another, while the first question is still held
        dialog.draft_field.edit.setText(str(draft))
        QCoreApplication.processEvents()
    assert dialog.checking and dialog.verdict.text() == CHECKING and shown == []

    judge.gate.set()
    verdict = verdict_in(qtbot, dialog)
    assert verdict.startswith("✗ incompatible: different vocabularies"), verdict
    assert shown == [(str(drafts[-1]), verdict)]  # one verdict, for the last path; none for the stale ones
    assert [q.draft for q in judge.asked] == ["", str(drafts[-1])]  # the three between were never read
    assert "stranger.gguf lacks llama.block_count" in dialog.fit.text()  # the fit line is the last pair's too


def test_closing_the_picker_with_a_verdict_pending_drops_it_quietly(
    qtbot: QtBot, qtlog: Any, capfd: pytest.CaptureFixture[str], make_gguf: GgufMaker, gated: Gated
) -> None:
    judge, verdicts = gated
    target, draft = make_gguf("target.gguf", tensor_elements=8192), make_gguf("draft.gguf")
    dialog = ModelPickerDialog(str(target), str(draft), verdicts=verdicts)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    assert judge.started.wait(WAIT_S) and dialog.checking
    dialog.close()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not shiboken6.isValid(dialog)  # gone, with its answer still being worked out
    judge.gate.set()
    assert verdicts.wait_idle(WAIT_S)
    QCoreApplication.processEvents()  # an answer sent to the closed picker would arrive now

    # The one thread goes on to the next picker's question.
    other, answers = QObject(), list[PairFacts]()
    verdicts.ask(other, PairQuestion(str(target), str(draft), 2048, MEMORY), answers.append)
    qtbot.waitUntil(lambda: bool(answers), timeout=VERDICT_TIMEOUT_MS)
    assert answers[0].verdict.startswith("✓ compatible") and len(judge.asked) == 2
    assert_quiet(capfd.readouterr().err, qtlog)


def test_a_picker_closed_while_checking_asks_again_when_shown_again(
    qtbot: QtBot, make_gguf: GgufMaker, gated: Gated
) -> None:
    judge, verdicts = gated
    target, draft = make_gguf("target.gguf", tensor_elements=8192), make_gguf("draft.gguf")
    dialog = ModelPickerDialog(str(target), str(draft), verdicts=verdicts)
    qtbot.addWidget(dialog)
    dialog.show()
    assert judge.started.wait(WAIT_S)
    dialog.reject()  # its answer is dropped
    judge.gate.set()
    assert verdicts.wait_idle(WAIT_S)
    QCoreApplication.processEvents()
    assert dialog.verdict.text() == CHECKING and not dialog.checking
    dialog.show()
    assert verdict_in(qtbot, dialog).startswith("✓ compatible") and len(judge.asked) == 2


def test_an_answer_for_a_deleted_asker_is_dropped(
    qtbot: QtBot, qtlog: Any, capfd: pytest.CaptureFixture[str], gated: Gated
) -> None:
    """Even an asker deleted without saying so (its parent went first) gets no call."""
    judge, verdicts = gated
    owner, answers = QObject(), list[PairFacts]()
    verdicts.ask(owner, PairQuestion("", "", 2048, MEMORY), answers.append)
    assert judge.started.wait(WAIT_S) and verdicts.pending(owner)
    shiboken6.delete(owner)
    judge.gate.set()
    assert verdicts.wait_idle(WAIT_S)
    QCoreApplication.processEvents()  # the answer to the deleted asker arrives, and is dropped
    survivor, later = QObject(), list[PairFacts]()
    verdicts.ask(survivor, PairQuestion("", "", 2048, MEMORY), later.append)
    qtbot.waitUntil(lambda: bool(later), timeout=VERDICT_TIMEOUT_MS)
    assert answers == [] and later[0].verdict == "choose a target model"
    assert_quiet(capfd.readouterr().err, qtlog)


def test_a_picker_waits_for_the_thread_to_answer(qtbot: QtBot, tmp_path: Path) -> None:
    """The app's own thread: a missing file is said as such once answered, no sooner."""
    dialog = ModelPickerDialog(str(tmp_path / "missing.gguf"), "")
    qtbot.addWidget(dialog)
    assert verdict_in(qtbot, dialog) == "target file not found"
    assert dialog.fit.text() == "" and not dialog.form.isRowVisible(dialog.heads_row)
