"""Earlier prompts' caches kept in memory, so a prompt seen before is not read again.

A context holds one sequence: a request whose prompt shares little with the
one before it drops what the context held. The cache keeps that state (the
KV of every token it held, copied to host memory by llama.cpp) and, when a
later prompt shares more with a kept state than with the context, loads it
back instead of reading those tokens again, as llama-server's prompt cache
does. States are kept per context (the target's, the draft's) within one
budget of bytes, the least recently used dropped first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from specchat.core.types import common_prefix_len

if TYPE_CHECKING:
    from specchat.core.llama.context import SavedState


class CachedContext(Protocol):
    """What the cache reads and loads back: a :class:`~specchat.core.llama.context.Context`, or one sequence of
    a :class:`~specchat.core.llama.multi_context.MultiContext`."""

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def observer(self) -> object: ...

    @property
    def cuts_anywhere(self) -> bool: ...

    def save_state(self) -> SavedState | None: ...

    def load_state(self, saved: SavedState) -> bool: ...


MIN_TOKENS = 16  # fewer tokens than this are as quick to read again as to keep and load back
DEFAULT_BUDGET_MIB = 2048


@dataclass
class CacheStats:
    """What the cache did since it was made."""

    kept: int = 0  # states saved
    loaded: int = 0  # states loaded back
    tokens_loaded: int = 0  # prompt tokens those loads spared a read
    dropped: int = 0  # states dropped for the budget or superseded


@dataclass
class PromptCache:
    """States of earlier prompts per context slot, within ``budget`` bytes (0: off), least recently used first."""

    budget: int = DEFAULT_BUDGET_MIB << 20
    stats: CacheStats = field(default_factory=CacheStats)
    _kept: list[tuple[str, SavedState]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(state.nbytes for _, state in self._kept)

    def states(self, slot: str) -> list[SavedState]:
        """The states kept for ``slot``, least recently used first."""
        return [state for s, state in self._kept if s == slot]

    def clear(self) -> None:
        self._kept.clear()

    def recall(self, slot: str, context: CachedContext, prompt: Sequence[int]) -> int:
        """Before ``context`` reads ``prompt``: keep what the prompt would drop, load the kept state sharing
        the most with it; return how many of the prompt's tokens the context now holds."""
        held = common_prefix_len(context.tokens, prompt)
        if self.budget <= 0 or context.observer is not None:
            return held
        best, shared = None, held + MIN_TOKENS - 1
        for state in self.states(slot):
            n = common_prefix_len(state.tokens, prompt)
            # A recurrent state cannot be cut back: only a state the prompt extends is of use.
            if n > shared and (context.cuts_anywhere or n == len(state.tokens)):
                best, shared = state, n
        if best is not None:  # out of the budget's reach while the context's state is kept
            self._kept.remove((slot, best))
        if len(context.tokens) - held >= MIN_TOKENS:
            self._keep(slot, context)
        if best is None:
            return held
        if not context.load_state(best):
            return 0
        self._kept.append((slot, best))
        self._fit()
        self.stats.loaded += 1
        self.stats.tokens_loaded += shared - held
        return shared

    def _keep(self, slot: str, context: CachedContext) -> None:
        tokens = context.tokens
        if any(common_prefix_len(state.tokens, tokens) == len(tokens) for state in self.states(slot)):
            return  # already kept, as it is or with more after it
        state = context.save_state()
        if state is None or state.nbytes > self.budget:
            return
        # a kept state that this one extends says nothing this one does not
        superseded = [
            (s, old) for s, old in self._kept if s == slot and common_prefix_len(old.tokens, tokens) == len(old.tokens)
        ]
        for entry in superseded:
            self._kept.remove(entry)
        self.stats.dropped += len(superseded)
        self._kept.append((slot, state))
        self.stats.kept += 1
        self._fit()

    def _fit(self) -> None:
        """Drop the least recently used states until the rest fit the budget."""
        total = self.nbytes
        while total > self.budget:
            total -= self._kept.pop(0)[1].nbytes
            self.stats.dropped += 1
