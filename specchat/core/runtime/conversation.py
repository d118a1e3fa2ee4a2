"""One conversation kept between turns: its messages, each reply driven by the runtime.

The runtime builds the prompt and streams the reply (:meth:`Runtime.prompt`, :meth:`Runtime.stream`);
the conversation only keeps the messages, so the caches' common prefix is reused between turns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.types import DrafterKind, Event, Finished, GenerationParams, TextSource, Verified

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import PromptProgress, Runtime


class Conversation:
    """One conversation on ``runtime``; the reply's prompt shares the previous turn's, so the caches carry over."""

    def __init__(self, runtime: Runtime, messages: list[dict[str, str]] | None = None) -> None:
        self.runtime = runtime
        self.messages: list[dict[str, str]] = [dict(m) for m in messages or []]
        self.last_prompt_text = ""
        self.last_tokens: list[int] = []

    def reply(
        self,
        user_text: str | None,
        params: GenerationParams,
        *,
        drafter: str = DrafterKind.DRAFT_MODEL,
        depth: DepthControl | None = None,
        cancel: CancelToken | None = None,
        continuation: str = "",
        progress: PromptProgress | None = None,
        sources: Sequence[TextSource] = (),
    ) -> Iterator[Event]:
        """Add ``user_text`` (if given) and stream the assistant's reply (``sources``: texts lookup drafts from,
        see :meth:`Runtime.stream`).

        With ``continuation`` (a reply cut at the token limit) the reply goes on from that text: it
        ends the prompt, and the assistant message stored in the conversation is that text and what follows.
        With ``progress``, a prompt with more than two steps to read is read step by step, each reported.
        Checks run before the first event: a bad message list, a prompt that
        does not fit or a missing draft raise SpecchatError here and leave the
        conversation unchanged.
        """
        messages = self.messages + ([{"role": "user", "content": user_text}] if user_text is not None else [])
        prompt = self.runtime.prompt(messages, continuation=continuation)
        stream = self.runtime.stream(
            prompt, params, drafter=drafter, depth=depth, cancel=cancel, progress=progress, sources=sources
        )
        self.messages = messages
        self.last_prompt_text = prompt.text
        return self._kept(stream, continuation)

    def _kept(self, stream: Iterator[Event], continuation: str) -> Iterator[Event]:
        """``stream`` as it comes; at its end the reply joins the messages (what there is of it, after an error)."""
        pieces: list[str] = [continuation]
        tokens: list[int] = []
        for event in stream:
            if isinstance(event, Verified):
                pieces.append(event.text)
                tokens.extend(event.committed)
            if isinstance(event, Finished):
                self.last_tokens = tokens
                self.messages.append({"role": "assistant", "content": "".join(pieces)})
            yield event

    def truncate_messages(self, n: int) -> None:
        """Keep only the first ``n`` messages (edit-and-resend, regenerate)."""
        del self.messages[n:]
