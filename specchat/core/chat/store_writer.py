"""The streaming writer: a reply stored as it streams, one transaction per verified round."""

from __future__ import annotations

from specchat.core.types import Finished, FinishReason, Verified

from .attachments import Attachment
from .store_tree import ConversationStore
from .transcript import ReplyFigures, TokenSpan, spans_of


class ReplyWriter:
    """Writes a streamed assistant reply into the store, one transaction per verified round.

    The reply's message is created with its first round, so a reply that never got a token leaves
    the conversation as it was; with ``keep`` (regenerate, edit and resend) the messages it replaces
    are deleted in that same transaction, never before. Every round also stores the figures so far,
    so a reply cut short by a crash keeps them. Pass the transcript's ``figures`` (and each round's
    spans to ``feed``) when the caller folds the events already; otherwise the writer folds them.
    """

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: int,
        *,
        keep: int | None = None,
        user_text: str | None = None,
        user_attachments: tuple[Attachment, ...] = (),
        figures: ReplyFigures | None = None,
        continues: int | None = None,
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.keep = keep
        self.user_text = user_text
        self.user_attachments = user_attachments  # an edited message's files, stored with it
        # A continuation (``continues``: the stored reply's id) appends to that message; until its first round
        # the message stays as stored, and a continuation that ends without one leaves it so.
        self.continues = continues
        self.rounds = 0
        self.message_id: int | None = continues
        self._folds = figures is None
        self.figures = figures if figures is not None else ReplyFigures()

    @property
    def replaces(self) -> bool:
        """True when the reply replaces stored messages (regenerate, edit) rather than answering a new one."""
        return self.keep is not None

    def feed(self, event: object, spans: list[TokenSpan] | None = None) -> None:
        """Store one event; ``spans`` are a verified round's spans when the caller has them."""
        if self._folds:
            self.figures.fold([event])
        if isinstance(event, Verified):
            self.rounds += 1
            spans = spans_of(event) if spans is None else spans
            if self.message_id is None:
                self.message_id = self.store.start_reply(
                    self.conversation_id,
                    spans,
                    event.text,
                    self.figures.as_dict(),
                    keep=self.keep,
                    user_text=self.user_text,
                    user_attachments=self.user_attachments,
                )
            else:
                self.store.append_spans(self.message_id, spans, event.text, self.figures.as_dict())
        elif isinstance(event, Finished):
            if self.continues is not None and not self.rounds:
                return  # a continuation that never got a token: the reply stays as it was stored
            if self.message_id is None:
                if self.replaces or event.reason is FinishReason.ERROR:
                    return  # nothing to show: the conversation stays as it was
                self.message_id = self.store.add_message(self.conversation_id, "assistant", "")
            stats = self.figures.as_dict()
            if event.message:
                stats["message"] = event.message
            self.store.finish_message(self.message_id, event.reason.value, stats)
