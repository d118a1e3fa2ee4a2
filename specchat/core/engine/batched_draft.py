"""The draft model shared by the sequences of a batch: one draft context, a sequence id each, one decode a step.

The draft context holds a sequence per batch slot (the target's slot number
is its sequence id here too, so a slot's next sequence finds its prefix in
both). Per round :meth:`BatchedDraftModel.draft` drafts for every sequence
that drafts with the model: first one decode catches each sequence up on the
tokens the target committed since its last draft (each sequence's cache cut
back to what it shares with the committed text, so a rejected draft goes with
``llama_memory_seq_rm`` on its sequence alone), then each draft step decodes
one row per sequence still drafting, and each draws from its row as the lone
draft model drafter does (:class:`~specchat.core.engine.drafters.base.DraftWalk`:
the argmax when greedy, a draw from the sampler's distribution otherwise, and
a sequence stops on its own at its length, its confidence floor, an end token
or a cancel). A sequence far behind (a new prompt, rounds sat out) reads the
rest on its own first, without logits.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from specchat.core.engine.drafters.base import Draft, Drafter, DraftRequest, DraftWalk
from specchat.core.types import DrafterKind, common_prefix_len

CATCH_UP_ROWS = 16
"""A sequence further behind than this reads the rest on its own (no logits) before the shared catch-up."""
STEADY_CATCH_UP = 2
"""A catch-up of at most this many tokens is a round's usual one (reported as ``sync_seconds``)."""
COST_WINDOW = 8
"""A draft position's cost is the median over this many latest drafting rounds (the least of the first two): a
load spike in one of them cannot price the model in or out, and a lasting change shows within this many."""


class DraftSlots(Protocol):
    """What the shared drafter drives: a :class:`specchat.core.llama.multi_context.MultiContext` on the draft."""

    @property
    def n_batch(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    def held(self, slot: int) -> Sequence[int]: ...

    def extend_to(self, slot: int, tokens: Sequence[int]) -> int: ...

    def truncate(self, slot: int, n_keep: int) -> None: ...

    def clear(self, slot: int) -> None: ...

    def step(self, rows: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]: ...


class BatchedDraftModel:
    """Drafts for several sequences at once on one multi-sequence draft context. One thread drives it."""

    def __init__(self, contexts: DraftSlots) -> None:
        self.contexts = contexts
        self.decodes = 0  # decodes run (catch-ups and draft steps)
        self.shared_decodes = 0  # of those, the ones carrying more than one sequence
        self.widest = 0  # the most sequences one decode carried
        self._per_position: deque[float] = deque(maxlen=COST_WINDOW)  # seconds per draft position, by round

    @property
    def step_seconds(self) -> float | None:
        """What one more position of the deepest draft adds to a round: the catch-up, the shared steps and the
        draws of the latest drafting rounds over their deepest drafts (see :data:`COST_WINDOW`); None before
        any."""
        if len(self._per_position) < 3:
            return min(self._per_position, default=None)
        return statistics.median(self._per_position)

    def drafter(self, slot: int) -> SlotDrafter:
        """The drafter of the sequence in ``slot``."""
        return SlotDrafter(self, slot)

    def draft(self, requests: Sequence[tuple[int, DraftRequest]]) -> list[Draft]:
        """One draft per ``(slot, request)``, every sequence's catch-up and draft steps in shared decodes."""
        started = time.perf_counter()
        ctx = self.contexts
        drafts = [Draft() for _ in requests]
        catch_up: list[tuple[int, Sequence[int]]] = []
        asking: list[int] = []  # indices of the requests that draft
        behind: dict[int, tuple[int, float]] = {}  # a long catch-up: its tokens and seconds
        for i, (slot, request) in enumerate(requests):
            tokens = request.tokens
            if min(request.k, ctx.n_ctx - len(tokens)) <= 0 or not tokens:
                continue
            reuse = min(common_prefix_len(ctx.held(slot), tokens), len(tokens) - 1)
            if len(tokens) - reuse > CATCH_UP_ROWS:
                read_started = time.perf_counter()
                ctx.extend_to(slot, tokens[:-1])
                behind[i] = (len(tokens) - reuse, time.perf_counter() - read_started)
                reuse = len(tokens) - 1
            else:
                ctx.truncate(slot, reuse)
            catch_up.append((slot, tokens[reuse:]))
            asking.append(i)
        if not asking:
            return drafts
        caught = {i: len(rows) for i, (_, rows) in zip(asking, catch_up, strict=True)}
        sync_started = time.perf_counter()
        firsts = [rows[-1] for rows in self._decode(catch_up)]
        synced = time.perf_counter()
        walks: dict[int, DraftWalk] = {}
        nexts: dict[int, int] = {}
        for i, row in zip(asking, firsts, strict=True):
            slot, request = requests[i]
            k = min(request.k, ctx.n_ctx - len(request.tokens))
            walk = DraftWalk(drafts[i], _with_k(request, k))
            walks[i] = walk
            x = walk.offer(row)
            if x is not None:
                nexts[i] = x
        while nexts:
            order = list(nexts)
            step_started = time.perf_counter()
            rows = ctx.step([(requests[i][0], [nexts[i]]) for i in order])
            seconds = time.perf_counter() - step_started
            self._count(len(order))
            nexts = {}
            for i, out in zip(order, rows, strict=True):
                walks[i].decoded(seconds)
                x = walks[i].offer(out[0])
                if x is not None:
                    nexts[i] = x
        for i, walk in walks.items():
            walk.finish(synced)
            draft = drafts[i]
            if i in behind:
                draft.catch_up, seconds = behind[i]
                draft.catch_up_seconds = seconds + synced - sync_started
            elif caught[i] <= STEADY_CATCH_UP:
                draft.sync_seconds = synced - sync_started
            else:
                draft.catch_up, draft.catch_up_seconds = caught[i], synced - sync_started
        deepest = max(len(d.tokens) for d in drafts)
        if deepest > 0 and not behind:  # a long catch-up is no round's usual cost
            self._per_position.append((time.perf_counter() - started) / deepest)
        return drafts

    def _decode(self, rows: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
        """Decode ``rows`` in as few batches as the context's batch size allows; each entry's logits rows."""
        out: list[np.ndarray] = []
        group: list[tuple[int, Sequence[int]]] = []
        size = 0
        for slot, tokens in rows:
            if group and size + len(tokens) > self.contexts.n_batch:
                out += self.contexts.step(group)
                self._count(len(group))
                group, size = [], 0
            group.append((slot, tokens))
            size += len(tokens)
        out += self.contexts.step(group)
        self._count(len(group))
        return out

    def _count(self, width: int) -> None:
        self.decodes += 1
        self.shared_decodes += width > 1
        self.widest = max(self.widest, width)


class SlotDrafter(Drafter):
    """One sequence's draft model drafter in a batch: its slot of the shared draft context."""

    kind = DrafterKind.DRAFT_MODEL
    follows_text = True

    def __init__(self, owner: BatchedDraftModel, slot: int) -> None:
        self.owner, self.slot = owner, slot

    def prefill(self, tokens: Sequence[int]) -> None:
        """Hold what the target holds, reusing the longest prefix the slot holds."""
        started = time.perf_counter()
        reused = self.owner.contexts.extend_to(self.slot, tokens)
        self.read = (len(tokens) - reused, time.perf_counter() - started)

    def behind(self, tokens: Sequence[int]) -> int:
        held = self.owner.contexts.held(self.slot)
        return max(0, len(tokens) - common_prefix_len(held, tokens) - STEADY_CATCH_UP)

    def draft(self, request: DraftRequest) -> Draft:
        """This sequence's draft alone (the batched engine drafts its sequences together instead)."""
        return self.owner.draft([(self.slot, request)])[0]

    def forget(self) -> None:
        """Empty the slot (after a failure that may have left it mid-round)."""
        self.owner.contexts.clear(self.slot)


def _with_k(request: DraftRequest, k: int) -> DraftRequest:
    return request if k == request.k else dataclasses.replace(request, k=k)
