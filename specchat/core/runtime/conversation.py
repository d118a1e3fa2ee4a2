"""One conversation on the loaded pair: the chat template, KV reuse between turns, each reply as engine events."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from specchat.core.cancel import CancelToken
from specchat.core.chat.template import validate_messages
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.drafters import Drafter
from specchat.core.engine.speculative import generate
from specchat.core.llama.context import common_prefix_len
from specchat.core.types import (
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    SpecchatError,
    Verified,
)

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import Runtime

PromptProgress = Callable[[int, int], None]  # prompt tokens in the target's cache so far, of how many
PROMPT_STEP = 256  # a long prompt is read in steps of this many tokens, reporting and checking Stop between them


class Conversation:
    """One conversation on a runtime (``engine``); it reuses the caches of the common prefix between turns."""

    def __init__(self, engine: Runtime, messages: list[dict[str, str]] | None = None) -> None:
        self.engine = engine
        self.messages: list[dict[str, str]] = [dict(m) for m in messages or []]
        self.adaptive = engine.adaptive_for(DrafterKind.DRAFT_MODEL)
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
    ) -> Iterator[Event]:
        """Add ``user_text`` (if given) and stream the assistant's reply.

        With ``continuation`` (a reply cut at the token limit) the reply goes on from that text: it
        ends the prompt, and the assistant message stored in the session is that text and what follows.
        With ``progress``, a prompt with more than two steps to read is read step by step, each reported.
        Checks run before the first event: a bad message list, a prompt that
        does not fit or a missing draft raise SpecchatError here and leave the
        conversation unchanged.
        """
        messages = self.messages + ([{"role": "user", "content": user_text}] if user_text is not None else [])
        validate_messages(messages)
        if messages[-1]["role"] != "user":
            raise SpecchatError("the last message must be from the user to get a reply")
        prompt_text, prompt = self.engine.tokenize_prompt(messages, continuation)
        chosen = self.engine.drafter_for(drafter)
        self.adaptive = self.engine.adaptive_for(drafter)
        self.messages = messages
        self.last_prompt_text = prompt_text
        return self._stream(prompt, params, chosen, depth, cancel, continuation, progress)

    def _read_prompt(self, prompt: list[int], progress: PromptProgress,
                     cancel: CancelToken | None) -> tuple[int, float] | None:
        """Bring the target to a long prompt step by step, reporting each; (reused, seconds), None if short.

        The speculative loop's own prefill then finds the prompt in the cache and decodes nothing more.
        """
        target = self.engine.target_context
        body = prompt[:-1]
        if len(body) - common_prefix_len(target.tokens, body) <= 2 * PROMPT_STEP:
            return None
        started = time.perf_counter()
        reused = done = target.extend_to(body[: common_prefix_len(target.tokens, body)])
        progress(done, len(body))
        while done < len(body) and not (cancel is not None and cancel.cancelled):
            done = min(len(body), done + PROMPT_STEP)
            target.extend_to(body[:done])
            progress(done, len(body))
        return reused, time.perf_counter() - started

    def _stream(self, prompt: list[int], params: GenerationParams, drafter: Drafter,
                depth: DepthControl | None, cancel: CancelToken | None, continuation: str = "",
                progress: PromptProgress | None = None) -> Iterator[Event]:
        pieces: list[str] = [continuation]
        tokens: list[int] = []
        if self.engine.remote is not None:  # Stop also ends a wait on a server that does not answer
            self.engine.remote.keep_waiting = None if cancel is None else (lambda: not cancel.cancelled)
        try:
            self.engine.recall(prompt)
            read = self._read_prompt(prompt, progress, cancel) if progress is not None else None
            if read is not None and cancel is not None and cancel.cancelled:
                stream: Iterable[Event] = [Finished(FinishReason.CANCELLED, GenerationStats(prompt_tokens=len(prompt)),
                                                    "stopped while reading the prompt")]
            else:
                stream = generate(self.engine.target_side, drafter, prompt, params,
                                  depth=depth, cancel=cancel, adaptive=self.adaptive)
            for event in stream:
                if isinstance(event, Verified):
                    pieces.append(event.text)
                    tokens.extend(event.committed)
                if isinstance(event, Finished):
                    if read is not None:  # the prompt was read before the loop: its figures are those steps'
                        event.stats.reused_prompt_tokens = read[0]
                        event.stats.prompt_seconds += read[1]
                    if event.reason is FinishReason.ERROR:
                        self.engine.forget_contexts()
                    self.last_tokens = tokens
                    self.messages.append({"role": "assistant", "content": "".join(pieces)})
                yield event
        except SpecchatError as exc:  # before the reply began: it has no figures yet
            self.engine.forget_contexts()
            self.last_tokens = tokens
            self.messages.append({"role": "assistant", "content": "".join(pieces)})
            yield Finished(FinishReason.ERROR, GenerationStats(), str(exc))


    def truncate_messages(self, n: int) -> None:
        """Keep only the first ``n`` messages (edit-and-resend, regenerate)."""
        del self.messages[n:]
