"""Reading a reply's prompt before it is sent: while the user writes, the idle runtime reads what it can.

A reply first brings the target (and a draft model) to its prompt; only the
tokens its contexts do not hold yet are decoded then. :func:`read_ahead` reads
the prompt a reply *would* get (built by :meth:`Runtime.prompt`, as the reply
builds it) into those same contexts ahead of time, a chunk at a time, checking
its cancel token between chunks, so a Send, an edit, a served request or a
load stops it within one chunk. It reads what the reply's prefill would (the
prompt minus its last token) and nothing else: when the prompt is sent as it
was read, the reply decodes none of it; when the text changed since, the
reply reads from the common prefix on. The contexts' KV is the same as the
reply's own read would leave, up to llama.cpp's batch shapes (the reply itself
reads a long prompt in steps).

Only contexts that can be cut anywhere are read ahead (a dense model's: an
edit cuts back to the common prefix, where a recurrent state could not), and
not where the target's MTP heads or a head follow it, nor for a target on
remote devices (the prompt cache is not kept there either).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specchat.core.cancel import CancelToken
from specchat.core.engine.registry import Part, default_drafter, entry_for
from specchat.core.llama.context import Context
from specchat.core.types import SpecchatError, common_prefix_len

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import Prompt, Runtime

READ_AHEAD_CHUNK = 48  # tokens per decode: small enough that a Send waits at most one such decode
ChunkRead = Callable[[str, int, int], None]  # after each chunk: the context ("target", "draft"), held, of how many


@dataclass(frozen=True)
class ReadAhead:
    """What one read ahead did: per context the prompt's tokens it held before, read, and holds now."""

    prompt_tokens: int  # the prompt's body: what a reply's prefill reads (all but the last token)
    target_reused: int = 0  # held already when it began (earlier turns, an earlier read ahead)
    target_read: int = 0
    draft_reused: int = 0
    draft_read: int = 0
    draft: bool = False  # whether the draft model's context was read too
    finished: bool = False  # False: stopped (cancelled) before every context held the prompt

    @property
    def read(self) -> int:
        """Tokens decoded in all, both contexts."""
        return self.target_read + self.draft_read

    @property
    def target_held(self) -> int:
        return self.target_reused + self.target_read


def readable(runtime: Runtime, drafter: str | None = None) -> list[tuple[str, Context]]:
    """The contexts a reply drafting with ``drafter`` (None: the pair's default) reads its prompt into and that
    can be read ahead: the target's, then the draft model's where that drafter drafts with it."""
    target = runtime.target_context
    if runtime.remote is not None or runtime.mtp_context is not None or runtime.head_context is not None:
        return []
    if not isinstance(target, Context) or not target.cuts_anywhere or target.observer is not None:
        return []
    out = [("target", target)]
    draft = runtime.draft_context
    if draft is not None and draft.cuts_anywhere and Part.DRAFT_MODEL in _drafter_needs(runtime, drafter):
        out.append(("draft", draft))
    return out


def _drafter_needs(runtime: Runtime, drafter: str | None) -> tuple[str, ...]:
    try:
        entry = entry_for(drafter, runtime.parts) if drafter is not None else default_drafter(runtime.offered)
    except SpecchatError:  # a drafter this pair lacks: the reply drafts with the pair's default
        entry = default_drafter(runtime.offered)
    if not entry.available(runtime.offered):
        entry = default_drafter(runtime.offered)
    return entry.needs


def read_ahead(
    runtime: Runtime,
    prompt: Prompt | Sequence[int],
    cancel: CancelToken,
    *,
    drafter: str | None = None,
    chunk: int = READ_AHEAD_CHUNK,
    recall: bool = True,
    on_chunk: ChunkRead | None = None,
) -> ReadAhead:
    """Read ``prompt`` into the contexts a reply with ``drafter`` reads it into, ``chunk`` tokens at a time.

    Stops before the next chunk once ``cancel`` is set. With ``recall`` a kept earlier prompt that shares more
    is loaded back first, and what the read would drop is kept, as a reply does (:meth:`Runtime.recall`).
    ``on_chunk`` is called after each chunk (on this thread).
    """
    tokens = list(prompt) if isinstance(prompt, Sequence) else list(prompt.tokens)
    body = tokens[:-1]
    result = ReadAhead(len(body))
    contexts = readable(runtime, drafter)
    if not contexts or not body or cancel.cancelled:
        return result
    if recall:
        runtime.recall(tokens)
    figures: dict[str, tuple[int, int]] = {}
    finished = True
    for name, context in contexts:
        reused = context.extend_to(body[: common_prefix_len(context.tokens, body)])  # cut back to what is shared
        done = reused
        while done < len(body) and not cancel.cancelled:
            done = min(len(body), done + chunk)
            context.extend_to(body[:done])
            if on_chunk is not None:
                on_chunk(name, done, len(body))
        figures[name] = (reused, done - reused)
        if done < len(body):
            finished = False
            break
    target, draft = figures.get("target", (0, 0)), figures.get("draft", (0, 0))
    return ReadAhead(len(body), target[0], target[1], draft[0], draft[1], draft=len(contexts) > 1, finished=finished)
