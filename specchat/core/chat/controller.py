"""The life of the open conversation and its replies, between the engine host, the store and the views.

:class:`ChatLogic` owns the ``Transcript`` of the open conversation and the
store's ``ReplyWriter`` of a streaming reply; it folds each engine event into
the transcript once and tells a :class:`ChatListener` what changed (the window's
``ui.chat_controller`` turns those calls into Qt signals; tests record them).
The engine host is passed in, so tests can drive it with a fake one. Every
store error on this path becomes a one-line notice. No Qt here.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from specchat.core.cancel import CancelToken
from specchat.core.chat.attachments import Attachment
from specchat.core.chat.store import ConversationStore, ReplyWriter, StoredMessage
from specchat.core.chat.titles import title_for
from specchat.core.chat.transcript import Message, ReplyFigures, TokenSpan, Transcript
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.registry import Part, default_drafter, resolve
from specchat.core.types import (
    DrafterKind,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    SpecchatError,
)

log = logging.getLogger(__name__)

TITLE_CHARS = 48


@dataclass
class ReplyRequest:
    """One reply to generate: the history before it, the new user text (None to regenerate)."""

    conversation_id: int
    history: list[dict[str, str]]
    user_text: str | None
    params: GenerationParams
    drafter: str = DrafterKind.DRAFT_MODEL  # a name in specchat.core.engine.registry.DRAFTERS
    depth: DepthControl = field(default_factory=DepthControl)
    continuation: str = ""  # a reply cut at the token limit, to go on from (user_text is then None)
    attachments: tuple[Attachment, ...] = ()  # the conversation's files, its own and the new message's (in order)


@dataclass(frozen=True)
class ReplySettings:
    """What the Speculation panel says a reply should use (the depth is not here: the panel moves the
    ``DepthControl`` the engine reads each round, the one path from the slider to the engine)."""

    params: GenerationParams
    drafter: str  # a name in specchat.core.engine.registry.DRAFTERS


class ReplyHost(Protocol):
    """What the chat logic needs of the engine host (``worker.WindowRuntimeHost``, or a fake in tests)."""

    def generate(self, request: ReplyRequest) -> CancelToken: ...


def transcript_of(stored: list[StoredMessage], system_prompt: str = "") -> Transcript:
    """A stored conversation as a transcript (token fates, figures and versions included)."""
    return Transcript(
        (
            Message(
                m.role,
                m.content,
                list(m.spans) if m.spans else None,
                finish_reason=m.finish_reason,
                figures=ReplyFigures.from_dict(m.stats) if m.role == "assistant" else None,
                id=m.id,
                version=m.version,
                versions=m.versions,
                attachments=list(m.attachments),
            )
            for m in stored
        ),
        system_prompt,
    )


class ChatListener:
    """What the chat logic tells its owner; each method does nothing here (override the ones you need)."""

    def transcript_replaced(self) -> None:
        """A different or reloaded transcript: redraw it."""

    def message_appended(self) -> None:
        """The transcript's last message is new: draw it."""

    def events_folded(self, batch: list[object]) -> None:
        """Engine events, already folded into the transcript on screen."""

    def reply_started(self) -> None:
        """A reply began streaming."""

    def reply_finished(self, finished: Finished) -> None:
        """The streaming reply ended (its ``Finished`` event)."""

    def conversations_changed(self) -> None:
        """The list of conversations (or a title) may have changed."""

    def notice(self, text: str) -> None:
        """A one-line error for the user."""

    def status(self, text: str) -> None:
        """A passing status-bar message."""

    def composer_text(self, text: str, replace: bool) -> None:
        """Text for the composer; ``replace``: replace what is typed there."""

    def composer_attachments(self, attachments: list[Attachment]) -> None:
        """Files for the composer (a message put back to edit, or withdrawn): they replace those attached there."""


class ChatLogic:
    """Send, regenerate, edit, stop; conversations opened, created and deleted."""

    def __init__(
        self,
        store: ConversationStore,
        host: ReplyHost,
        reply_settings: Callable[[], ReplySettings],
        depth_control: DepthControl,
        listener: ChatListener | None = None,
    ) -> None:
        self.listener = listener or ChatListener()
        self.store = store
        self.host = host
        self.reply_settings = reply_settings
        self.depth_control = depth_control
        self.transcript = Transcript()  # the conversation on screen
        self.conversation_id: int | None = None
        self._live: Transcript | None = None  # the streaming reply's conversation, on screen or not
        self._live_conversation: int | None = None
        self.offered: frozenset[str] = frozenset({Part.DRAFT_MODEL.value})  # the loaded pair's parts
        self.default_system_prompt = ""  # for new conversations (the window passes the setting)
        self.closing = False
        self._writer: ReplyWriter | None = None
        self._token: CancelToken | None = None
        self._edit_index: int | None = None  # the user message being edited, until sent or abandoned
        self._save_failed = False

    @property
    def has_draft_model(self) -> bool:
        """Whether the pair has a draft model (a view of :attr:`offered`, which the window may set instead)."""
        return Part.DRAFT_MODEL.value in self.offered

    @has_draft_model.setter
    def has_draft_model(self, present: bool) -> None:
        self._offer(Part.DRAFT_MODEL, present)

    @property
    def has_mtp(self) -> bool:
        """Whether the pair has MTP heads (a view of :attr:`offered`)."""
        return Part.MTP_HEADS.value in self.offered

    @has_mtp.setter
    def has_mtp(self, present: bool) -> None:
        self._offer(Part.MTP_HEADS, present)

    def _offer(self, part: Part, present: bool) -> None:
        self.offered = self.offered | {part.value} if present else self.offered - {part.value}

    @property
    def streaming(self) -> bool:
        return self._writer is not None

    @property
    def editing(self) -> bool:
        return self._edit_index is not None

    def can_regenerate(self) -> bool:
        m = self.transcript.messages
        return len(m) >= 2 and m[-1].role == "assistant" and m[-2].role == "user" and not self.streaming

    # -- conversations -----------------------------------------------------------------

    def new_conversation(self) -> None:
        """Start an empty conversation (a streaming reply goes on in its own)."""
        try:
            self.conversation_id = self.store.create_conversation(system_prompt=self.default_system_prompt)
        except sqlite3.Error as exc:
            self.listener.notice(f"a new conversation could not be saved: {exc}")
            return
        self._edit_index = None
        self.transcript = Transcript(system_prompt=self.default_system_prompt)
        self.listener.transcript_replaced()
        self.listener.conversations_changed()

    @property
    def streaming_here(self) -> bool:
        """True while the conversation on screen is the one whose reply streams."""
        return self.streaming and self.transcript is self._live

    def open_conversation(self, conversation_id: int | None) -> None:
        """Show a stored conversation with its highlighting and figures; a streaming reply goes on in its own."""
        if conversation_id == self.conversation_id:
            return
        self.conversation_id = conversation_id
        self._edit_index = None
        if self.streaming and conversation_id == self._live_conversation:
            assert self._live is not None
            self.transcript = self._live
            self.listener.transcript_replaced()
        else:
            self.reload()
        self.listener.conversations_changed()

    def reload(self) -> None:
        """Show the open conversation as stored."""
        stored: list[StoredMessage] = []
        system_prompt = ""
        try:
            if self.conversation_id is not None:
                stored = self.store.messages(self.conversation_id)
                system_prompt = self.store.conversation(self.conversation_id).system_prompt
        except (sqlite3.Error, SpecchatError) as exc:
            self.listener.notice(f"the conversation could not be read: {exc}")
        self.transcript = transcript_of(stored, system_prompt)
        self.listener.transcript_replaced()

    def _take_stored_ids(self, *, redraw: bool) -> None:
        """Give the transcript's messages their stored ids and versions (no redraw unless versions appeared)."""
        try:
            stored = self.store.messages(self.conversation_id) if self.conversation_id is not None else []
        except sqlite3.Error as exc:
            self.listener.notice(f"the conversation could not be read: {exc}")
            return
        shown = self.transcript.messages
        if [m.content for m in stored] != [m.content for m in shown]:
            self.reload()  # the store and the screen disagree: show what is stored
            return
        for message, row in zip(shown, stored, strict=True):
            message.id, message.version, message.versions = row.id, row.version, row.versions
        if redraw:  # a new version: the view shows which of how many
            self.listener.transcript_replaced()

    def rename(self, conversation_id: int, title: str) -> None:
        try:
            self.store.rename(conversation_id, title)
        except sqlite3.Error as exc:
            self.listener.notice(f"the conversation could not be renamed: {exc}")
        self.listener.conversations_changed()

    def delete_conversation(self, conversation_id: int) -> None:
        if self.streaming and conversation_id == self._live_conversation:
            self.listener.notice("stop the reply before deleting its conversation")
            return
        try:
            self.store.delete(conversation_id)
        except sqlite3.Error as exc:
            self.listener.notice(f"the conversation could not be deleted: {exc}")
            return
        if conversation_id == self.conversation_id:
            self.conversation_id = None
            self.transcript = Transcript(system_prompt=self.default_system_prompt)
            self.listener.transcript_replaced()
        self.listener.conversations_changed()

    # -- replies -----------------------------------------------------------------------

    def send(self, text: str, attachments: tuple[Attachment, ...] = ()) -> bool:
        """Store a user message (or an edited one) with its attached files and start its reply; False if nothing
        was sent."""
        text = text.strip()
        if not (text or attachments) or self.streaming:
            return False
        edit_index, self._edit_index = self._edit_index, None
        title = title_for(text or ", ".join(a.name for a in attachments), TITLE_CHARS)
        try:
            if self.conversation_id is None:
                self.conversation_id = self.store.create_conversation(title, self.default_system_prompt)
                self.transcript.system_prompt = self.default_system_prompt
            elif not self.transcript.messages:
                self.store.rename(self.conversation_id, title)
            if edit_index is None:
                self.store.add_message(self.conversation_id, "user", text, attachments)
        except sqlite3.Error as exc:
            self.listener.notice(f"the message could not be saved: {exc}")
            return False
        self.listener.conversations_changed()
        history = self.transcript.history()
        message = self.transcript.add_user(text, attachments)
        self.listener.message_appended()
        if edit_index is None:
            self._start_reply(history, message.prompt)
        else:  # the edited message and what followed stay stored until the new reply's first round
            self._start_reply(
                history, message.prompt, keep=edit_index, user_text_to_store=text, attachments_to_store=attachments
            )
        return True

    def regenerate(self) -> None:
        """Generate the last reply again; the old one stays stored until the new one's first round."""
        if self.conversation_id is None or not self.can_regenerate():
            return
        msgs = self.transcript.messages
        keep = len(msgs) - 1
        self.transcript = Transcript(msgs[:keep], self.transcript.system_prompt)
        self.listener.transcript_replaced()
        self._start_reply(self.transcript.history(keep - 1), msgs[keep - 1].prompt, keep=keep)

    def can_continue(self) -> bool:
        """The last reply was cut at the token limit and can go on (stored, with its token fates)."""
        reply = self.transcript.reply
        return (
            not self.streaming
            and self.conversation_id is not None
            and self.transcript.can_continue()
            and reply is not None
            and reply.id is not None
        )

    def continue_reply(self) -> bool:
        """Go on with the last reply where the token limit cut it: speculatively, into the same message."""
        if not self.can_continue():
            return False
        assert self.conversation_id is not None
        try:
            settings = self.reply_settings()
        except SpecchatError as exc:
            self.listener.notice(str(exc))
            return False
        drafter = self._drafter(settings)
        index = len(self.transcript.messages) - 1
        history, text = self.transcript.history(index), self.transcript.messages[index].content
        self._live, self._live_conversation = self.transcript, self.conversation_id
        reply = self.transcript.resume_reply(settings.params.max_tokens)
        assert reply is not None and reply.figures is not None
        reply.figures.sampler = dataclasses.asdict(settings.params.sampler)
        self._writer = ReplyWriter(self.store, self.conversation_id, figures=reply.figures, continues=reply.id)
        self._save_failed = False
        self.listener.transcript_replaced()  # the reply is drawn again, streaming
        self.listener.reply_started()
        request = ReplyRequest(
            self.conversation_id,
            history,
            None,
            settings.params,
            drafter,
            self.depth_control,
            continuation=text,
            attachments=tuple(self.transcript.attachments()),
        )
        self._token = self.host.generate(request)
        return True

    def edit_message(self, index: int) -> None:
        """Put a user message back in the composer; sending replaces it and what followed, stop keeps them."""
        msgs = self.transcript.messages
        if self.streaming or self.conversation_id is None or not 0 <= index < len(msgs):
            return
        self._edit_index = index
        self.transcript = Transcript(msgs[:index], self.transcript.system_prompt)
        self.listener.transcript_replaced()
        self.listener.composer_text(msgs[index].content, True)
        self.listener.composer_attachments(list(msgs[index].attachments))
        self.listener.status("Editing: send to replace the message and what followed it, Esc to keep them")

    def set_system_prompt(self, text: str) -> None:
        """The open conversation's system prompt (sent first with every later reply)."""
        text = text.strip()
        try:
            if self.conversation_id is None:
                self.conversation_id = self.store.create_conversation(system_prompt=text)
                self.listener.conversations_changed()
            else:
                self.store.set_system_prompt(self.conversation_id, text)
        except sqlite3.Error as exc:
            self.listener.notice(f"the system prompt could not be saved: {exc}")
            return
        self.transcript.system_prompt = text
        self.listener.status("System prompt saved: it applies from the next reply")

    def switch_version(self, index: int, step: int) -> bool:
        """Show the previous (-1) or next (+1) version of message ``index`` and the conversation after it."""
        msgs = self.transcript.messages
        if self.streaming_here or self.conversation_id is None or not 0 <= index < len(msgs):
            return False
        message = msgs[index]
        if message.id is None or not 1 <= message.version + step <= message.versions:
            return False
        try:
            self.store.switch_version(self.conversation_id, message.id, step)
        except sqlite3.Error as exc:
            self.listener.notice(f"the other version could not be shown: {exc}")
            return False
        self._edit_index = None
        self.reload()
        return True

    def stop(self) -> None:
        """Cancel the streaming reply (it ends within one round), or abandon an edit."""
        if self._token is not None:
            self._token.cancel()
        elif self._edit_index is not None:
            self._edit_index = None
            self.listener.composer_text("", True)
            self.listener.composer_attachments([])
            self.reload()

    def _start_reply(
        self,
        history: list[dict[str, str]],
        user_text: str,
        *,
        keep: int | None = None,
        user_text_to_store: str | None = None,
        attachments_to_store: tuple[Attachment, ...] = (),
    ) -> None:
        assert self.conversation_id is not None
        try:
            settings = self.reply_settings()
        except SpecchatError as exc:
            self.listener.notice(str(exc))
            return
        drafter = self._drafter(settings)
        self._live, self._live_conversation = self.transcript, self.conversation_id
        reply = self.transcript.begin_reply()
        assert reply.figures is not None
        reply.figures.sampler = dataclasses.asdict(settings.params.sampler)  # a race needs it (core/chat/race.py)
        reply.figures.max_tokens = settings.params.max_tokens  # "stopped at the 512-token limit"
        reply.figures.drafting = {"drafter": drafter, "depth": self.depth_control.requested}  # a race drafts so too
        self._writer = ReplyWriter(
            self.store,
            self.conversation_id,
            keep=keep,
            user_text=user_text_to_store,
            user_attachments=attachments_to_store,
            figures=reply.figures,
        )
        self._save_failed = False
        self.listener.message_appended()
        self.listener.reply_started()
        request = ReplyRequest(
            self.conversation_id,
            history,
            user_text,
            settings.params,
            drafter,
            self.depth_control,
            attachments=tuple(self.transcript.attachments()),
        )
        self._token = self.host.generate(request)

    def _drafter(self, settings: ReplySettings) -> str:
        """The drafter asked for (``"draft"`` with a head loaded: the head's drafter, as the registry resolves it),
        or the registry's default for the loaded pair in its place (said in the status bar)."""
        asked = resolve(settings.drafter, self.offered)
        if asked.available(self.offered):
            return asked.name
        instead = default_drafter(self.offered)
        self.listener.status(
            f"The loaded pair has no {asked.lacking()}: drafting with {instead.label_for(self.offered)}"
        )
        return instead.name

    def on_events(self, batch: list[object]) -> None:
        """Engine events of the streaming reply (on the GUI thread)."""
        if self.closing or self._writer is None:
            return
        live = self._live
        assert live is not None
        finished: Finished | None = None
        for event in batch:
            spans = live.fold(event)
            self._save(event, spans)
            if isinstance(event, Finished):
                finished = event
        if live is self.transcript:
            self.listener.events_folded(batch)
        if finished is not None:
            self._end_reply(finished)

    def reply_waiting(self, waits: bool) -> None:
        """The streaming reply waits for a served request (True) or decodes now (False): its time to first token
        counts from when it decodes, its wait is kept beside it."""
        if waits or self._live is None or self._writer is None:
            return
        reply = self._live.reply
        if reply is not None and reply.figures is not None and not reply.finished:
            reply.figures.decoding_began()

    def on_failed(self, message: str) -> None:
        """The reply could not start or broke: end it like the engine's own error (one notice)."""
        if self.closing:
            return
        if self._writer is None:
            self.listener.notice(message)
            return
        self.on_events([Finished(FinishReason.ERROR, GenerationStats(), message)])

    def close(self) -> None:
        """The window closes: mark a reply still streaming as cancelled (the engine thread has stopped)."""
        self.closing = True
        if self._writer is not None:
            self._save(Finished(FinishReason.CANCELLED, GenerationStats(), "window closed"), [])
            self._writer = None

    def _save(self, event: object, spans: list[TokenSpan]) -> None:
        """Write one event of the streaming reply; a failing database is reported once, not fatal."""
        if self._writer is None or self._save_failed:
            return
        try:
            self._writer.feed(event, spans)
        except sqlite3.Error as exc:
            self._save_failed = True
            self.listener.notice(f"the reply could not be saved: {exc}")

    def _end_reply(self, finished: Finished) -> None:
        writer, self._writer = self._writer, None
        live, self._live = self._live, None
        self._token = None
        here = live is self.transcript
        if writer is not None and writer.continues is not None and not writer.rounds and here:
            self.reload()  # a continuation that never got a token: the reply as stored, cut at the limit
        elif writer is not None and writer.message_id is None and not self._save_failed and here:  # nothing stored
            if finished.reason is FinishReason.ERROR and not writer.replaces:
                self._withdraw_message(writer)
            elif writer.user_text is not None:  # an edit that never got a reply: keep the text and its files
                self.listener.composer_text(writer.user_text, False)
                if writer.user_attachments:
                    self.listener.composer_attachments(list(writer.user_attachments))
            self.reload()
        elif here and writer is not None and writer.message_id is not None and not self._save_failed:
            self._take_stored_ids(redraw=writer.replaces)
        if finished.reason is FinishReason.ERROR and finished.message:
            self.listener.notice(finished.message)
        self.listener.conversations_changed()
        self.listener.reply_finished(finished)

    def _withdraw_message(self, writer: ReplyWriter) -> None:
        """A new message whose reply failed before its first token goes back to the composer."""
        msgs = self.transcript.messages
        user = len(msgs) - 2
        if user < 0 or msgs[user].role != "user":
            return
        self.listener.composer_text(msgs[user].content, False)
        if msgs[user].attachments:
            self.listener.composer_attachments(list(msgs[user].attachments))
        try:
            self.store.truncate(writer.conversation_id, user)
        except sqlite3.Error as exc:
            log.warning("could not withdraw the failed message: %s", exc)
