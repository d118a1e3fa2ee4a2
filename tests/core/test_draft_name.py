"""What ``"draft"`` means: the draft-model drafter, or, where the file loaded with ``--draft`` is a head, that
head's own drafter (``registry.resolve``); the window records the resolved name, never ``"draft"`` for a head."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.chat.controller import ChatListener, ChatLogic, ReplyRequest, ReplySettings
from specchat.core.chat.store import ConversationStore
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.registry import Part, drafter_entries, head_drafter_name, head_part, resolve
from specchat.core.head_formats import head_formats
from specchat.core.types import DrafterKind, GenerationParams, SpecchatError

DRAFT = DrafterKind.DRAFT_MODEL.value
# Every head format some entry drives, with that entry's name (read from the tables, never pinned here).
DRIVEN = [(f.kind, name) for f in head_formats() if (name := head_drafter_name(f.kind)) is not None]


def test_the_driven_head_formats_are_found() -> None:
    assert DRIVEN  # the tables name at least one head an entry drives, or the tests below test nothing


@pytest.mark.parametrize(("head_kind", "drafter"), DRIVEN)
def test_draft_asked_of_a_head_means_the_heads_own_drafter(head_kind: str, drafter: str) -> None:
    offered = {head_part(head_kind)}
    entry = resolve(DRAFT, offered)
    assert entry.name == drafter and entry.key != DRAFT and entry.available(offered)
    assert resolve(DrafterKind.DRAFT_MODEL, offered) is entry  # the enum member and its plain name alike


def test_draft_with_a_draft_model_and_every_other_name_mean_themselves() -> None:
    for offered in ({Part.DRAFT_MODEL.value}, {Part.DRAFT_MODEL.value, *(head_part(k) for k, _ in DRIVEN)}):
        assert resolve(DRAFT, offered).name == DrafterKind.DRAFT_MODEL
    heads = {head_part(k) for k, _ in DRIVEN}
    for entry in drafter_entries():
        if entry.name != DrafterKind.DRAFT_MODEL:
            assert resolve(entry.key, heads) is entry


def test_a_head_no_drafter_drives_leaves_draft_unavailable_and_unknown_names_are_one_line() -> None:
    undriven = {head_part("no-such-head-format")}
    entry = resolve(DRAFT, undriven)
    assert entry.name == DrafterKind.DRAFT_MODEL and not entry.available(undriven)
    with pytest.raises(SpecchatError) as refused:
        resolve("not-a-drafter", undriven)
    assert "\n" not in str(refused.value) and "not-a-drafter" in str(refused.value)


class Statuses(ChatListener):
    def __init__(self) -> None:
        self.said: list[str] = []

    def status(self, text: str) -> None:
        self.said.append(text)


class Submitter:
    def __init__(self) -> None:
        self.requests: list[ReplyRequest] = []

    def generate(self, request: ReplyRequest) -> CancelToken:
        self.requests.append(request)
        return CancelToken()


@pytest.mark.parametrize(("head_kind", "drafter"), DRIVEN)
def test_a_saved_draft_setting_drafts_with_the_loaded_head_and_the_reply_records_its_drafter(
    tmp_path: Path, head_kind: str, drafter: str
) -> None:
    """A setting saved while a draft model was loaded ("draft") keeps working once a head is loaded instead."""
    host, listener = Submitter(), Statuses()
    settings = ReplySettings(GenerationParams(max_tokens=8), DRAFT)
    logic = ChatLogic(ConversationStore(tmp_path / "chats.sqlite3"), host, lambda: settings, DepthControl(), listener)
    logic.offered = frozenset({head_part(head_kind)})
    assert logic.send("Hello")
    (request,) = host.requests
    assert request.drafter == drafter and listener.said == []  # no "has no draft model" fallback
    figures = logic.transcript.messages[-1].figures
    assert figures is not None and figures.drafting is not None and figures.drafting["drafter"] == drafter
