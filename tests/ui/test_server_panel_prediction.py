"""The Server panel shows a served request's prediction acceptance: a real panel offscreen, fed the events a
request with a prediction produces (the engine's own dataclasses), beside one without."""

from __future__ import annotations

import dataclasses

from specchat.core.types import PREDICTION_NAME, DraftSource, Finished, FinishReason, GenerationStats
from specchat.server.protocol import Defaults, parse_chat
from specchat.server.request_queue import Job, Started
from specchat.ui.server_panel import COLUMNS, ServerPanel
from support.events import verified
from support.qt_items import table_cell

LOOKUP = DraftSource.LOOKUP


def job(prediction: str | None) -> Job:
    body: dict[str, object] = {"messages": [{"role": "user", "content": "Fix the typo."}]}
    if prediction is not None:
        body["prediction"] = {"type": "content", "content": prediction}
    return Job(parse_chat(body, Defaults()), emit=lambda _event: None, time_limit=60.0, client="127.0.0.1:5000")


def status_cell(panel: ServerPanel, row: int) -> tuple[str, str]:
    item = table_cell(panel.table, row, COLUMNS.index("Status"))
    return item.text(), item.toolTip()


def test_the_status_shows_how_much_of_the_prediction_was_accepted(qtbot) -> None:
    panel = ServerPanel()
    qtbot.addWidget(panel)
    with_prediction, without = job("def f():\n    return 1\n"), job(None)
    assert with_prediction.request.prediction is not None
    for j in (with_prediction, without):
        panel.on_event(j, Started(12, "composite", 0.0))
    # Round 1: 6 drafts from the prediction, 6 kept; round 2: 2 kept, 1 rejected, then a model draft rejected.
    first = dataclasses.replace(verified(0, ("a",) * 6, (), "b"), sources=(LOOKUP,) * 6, origins=(PREDICTION_NAME,) * 6)
    second = dataclasses.replace(
        verified(1, ("c", "d"), ("e", "f"), "g"),
        sources=(LOOKUP, LOOKUP, LOOKUP, DraftSource.MODEL),
        origins=(PREDICTION_NAME, PREDICTION_NAME, PREDICTION_NAME, ""),
    )
    conversation = dataclasses.replace(verified(0, ("a",) * 3, (), "b"), sources=(LOOKUP,) * 3, origins=("",) * 3)
    panel.on_event(with_prediction, first)
    text, tip = status_cell(panel, 0)
    assert text == "running (composite) · prediction 100% accepted"
    panel.on_event(with_prediction, second)
    panel.on_event(with_prediction, Finished(FinishReason.EOS, GenerationStats(generated=11)))
    text, tip = status_cell(panel, 0)
    assert text == "eos · prediction 89% accepted"  # 8 of 9
    assert tip == "8 of 9 tokens drafted from the prediction were accepted"
    panel.on_event(without, conversation)
    panel.on_event(without, Finished(FinishReason.EOS, GenerationStats(generated=4)))
    assert status_cell(panel, 1) == ("eos", "")  # no prediction sent: no figure


def test_a_prediction_never_drafted_from_says_so(qtbot) -> None:
    panel = ServerPanel()
    qtbot.addWidget(panel)
    j = job("unrelated text")
    panel.on_event(j, Started(12, "composite", 0.0))
    panel.on_event(j, dataclasses.replace(verified(0, ("a",), (), "b"), sources=(LOOKUP,), origins=("",)))
    panel.on_event(j, Finished(FinishReason.EOS, GenerationStats(generated=2)))
    assert status_cell(panel, 0)[0] == "eos · prediction not drafted from"
