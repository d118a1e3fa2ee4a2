"""A llama.cpp context holding several sequences at once: one batch carries every sequence's tokens.

Each sequence has its own slot (a llama.cpp sequence id) in one KV buffer of
``n_seq * n_ctx`` cells (``kv_unified``); a slot is held to ``n_ctx``
positions, so the slots together never need more than the buffer and a long
prompt never takes another reply's room mid-reply. One :meth:`MultiContext.step` decodes
the tokens of several slots in one ``llama_decode`` (each row with its slot's
id and its position) and returns every row's logits, per slot.

Only attention-only (dense) models: cutting one sequence back is then a
``llama_memory_seq_rm`` of its tail. A hybrid or recurrent model keeps one
state per sequence that has absorbed every token; rolling that back per
sequence (snapshots or saved states per slot) is not built yet, so such a
target is refused with one line.

A released slot keeps what it holds: the next sequence is given the free slot
that shares the longest prefix with its prompt, so a conversation's next turn
reads only what is new (a prompt cache per conversation, across slots).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import llama_cpp
import numpy as np

from specchat.core.llama.context import ContextFullError, SavedState
from specchat.core.llama.model import Model, ModelKind
from specchat.core.llama.threads import ThreadTuner
from specchat.core.types import SpecchatError, common_prefix_len

_DECODE_CODES = {1: "no room in the KV cache", 2: "aborted", -1: "invalid batch"}
MAX_SEQUENCES = 64


def check_batchable(model: Model) -> None:
    """Refuse (one line) a target whose sequences cannot be cut back one by one: a hybrid or recurrent model."""
    if model.kind is not ModelKind.DENSE:
        raise SpecchatError(
            f"{model.name} is a {model.kind.value} model ({model.arch}): serving several requests at once "
            "(--parallel above 1) needs an attention-only target for now (rolling back one sequence's "
            "recurrent state inside a shared batch is not built yet); use --parallel 1"
        )


class MultiContext:
    """Up to ``n_seq`` sequences on one dense model, ``n_ctx`` positions each. Not thread-safe: one worker owns it."""

    def __init__(
        self,
        model: Model,
        *,
        n_seq: int,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_threads: int | None = None,
        tuner: ThreadTuner | None = None,
    ) -> None:
        check_batchable(model)
        if not 1 <= n_seq <= MAX_SEQUENCES:
            raise SpecchatError(f"the number of sequences must be 1-{MAX_SEQUENCES}, got {n_seq}")
        if n_ctx < 16:
            raise SpecchatError(f"context size must be at least 16 tokens, got {n_ctx}")
        self.model = model
        params = llama_cpp.llama_context_default_params()
        params.n_seq_max = n_seq
        # One KV buffer for all sequences: a batch over several sequences is then one graph, where a stream
        # per sequence splits it (measured on the demo target, 4 sequences: 121-125 against 78-90 tokens/s).
        # Each sequence is held to n_ctx positions here, so together they never need more than the buffer.
        params.kv_unified = True
        params.n_ctx = n_ctx * n_seq
        params.n_batch = params.n_ubatch = n_batch
        self.tuner = tuner or ThreadTuner((n_threads,) if n_threads else None)
        self._threads = params.n_threads = params.n_threads_batch = self.tuner.current
        self._ptr = llama_cpp.llama_init_from_model(model.ptr, params)
        if not self._ptr:
            raise SpecchatError(
                f"llama.cpp could not create a context of {n_seq} x {n_ctx} tokens for {model.name} (out of memory?)"
            )
        self._memory = llama_cpp.llama_get_memory(self._ptr)
        self.n_seq = n_seq
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ptr)) // n_seq
        self.n_batch = n_batch
        self.n_vocab = model.n_vocab
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]  # what each slot's memory holds
        self._free: list[int] = list(range(n_seq))
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        b = self._batch
        for i in range(n_batch):
            b.n_seq_id[i] = 1
        self._tok = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self._want = np.ctypeslib.as_array(b.logits, shape=(n_batch,))

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        self.close()

    # --- slots ---------------------------------------------------------------
    @property
    def free_slots(self) -> int:
        return len(self._free)

    def acquire(self, prompt: Sequence[int] = ()) -> int:
        """A free slot for a new sequence: the one holding the longest prefix of ``prompt`` (kept, the rest cut)."""
        if not self._free:
            raise SpecchatError(f"all {self.n_seq} sequences are in use")
        slot = max(self._free, key=lambda s: (common_prefix_len(self.tokens[s], prompt), -s))
        self._free.remove(slot)
        return slot

    def release(self, slot: int) -> None:
        """Give ``slot`` back; its memory stays for a later prompt that shares its prefix."""
        self._check(slot)
        if slot not in self._free:
            self._free.append(slot)

    def clear(self, slot: int) -> None:
        """Forget everything ``slot`` holds."""
        self._check(slot)
        llama_cpp.llama_memory_seq_rm(self._memory, slot, -1, -1)
        self.tokens[slot].clear()

    def truncate(self, slot: int, n_keep: int) -> None:
        """Forget ``slot``'s positions from ``n_keep`` on (a dense cache cuts anywhere)."""
        self._check(slot)
        held = self.tokens[slot]
        if n_keep >= len(held):
            return
        n_keep = max(n_keep, 0)
        if not llama_cpp.llama_memory_seq_rm(self._memory, slot, n_keep, -1):
            self.clear(slot)  # never expected on an attention cache; exact either way
            return
        del held[n_keep:]

    def save_state(self, slot: int) -> SavedState | None:
        """``slot``'s whole memory (its tokens and llama.cpp's bytes); None when empty."""
        self._check(slot)
        if not self.tokens[slot]:
            return None
        size = llama_cpp.llama_state_seq_get_size(self._ptr, slot)
        data = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(self._ptr, data, size, slot) != size:
            return None
        return SavedState(tuple(self.tokens[slot]), data)

    def load_state(self, slot: int, saved: SavedState) -> bool:
        """Make ``slot`` hold what ``saved`` held (saved from any slot); False and an empty slot if refused."""
        self.clear(slot)
        if llama_cpp.llama_state_seq_set_data(self._ptr, saved.data, len(saved.data), slot) == 0:
            self.clear(slot)
            return False
        self.tokens[slot].extend(saved.tokens)
        return True

    def held(self, slot: int) -> list[int]:
        """The tokens ``slot``'s memory holds, position by position."""
        self._check(slot)
        return self.tokens[slot]

    def positions(self, slot: int) -> int:
        """How many positions llama.cpp's memory holds for ``slot`` (its highest position + 1), asked of llama.cpp."""
        self._check(slot)
        return int(llama_cpp.llama_memory_seq_pos_max(self._memory, slot)) + 1

    def view(self, slot: int) -> Slot:
        """``slot`` seen as a single-sequence context."""
        return Slot(self, slot)

    def _check(self, slot: int) -> None:
        if not 0 <= slot < self.n_seq:
            raise SpecchatError(f"no sequence {slot} in a context of {self.n_seq}")

    # --- decoding --------------------------------------------------------------
    def extend_to(self, slot: int, tokens: Sequence[int]) -> int:
        """Make ``slot`` hold exactly ``tokens`` (no logits), reusing its common prefix; return how many were reused."""
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"{len(tokens)} tokens do not fit in the {self.n_ctx}-token context")
        reuse = common_prefix_len(self.tokens[slot], tokens)
        self.truncate(slot, reuse)
        start = reuse
        while start < len(tokens):
            chunk = list(tokens[start : start + self.n_batch])
            self._run([(slot, chunk)], want_all=False)
            start += len(chunk)
        return reuse

    def step(self, rows: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
        """Append each ``(slot, tokens)`` in one batch; per entry, its logits rows (a copy, one per token)."""
        if not rows:
            raise ValueError("nothing to decode")
        seen: set[int] = set()
        for slot, tokens in rows:
            self._check(slot)
            if slot in seen:
                raise ValueError(f"sequence {slot} appears twice in one batch")
            seen.add(slot)
            if not tokens:
                raise ValueError(f"nothing to decode for sequence {slot}")
            if len(self.tokens[slot]) + len(tokens) > self.n_ctx:
                raise ContextFullError(
                    f"{len(self.tokens[slot]) + len(tokens)} tokens do not fit in the {self.n_ctx}-token context"
                )
        total = sum(len(t) for _, t in rows)
        if total > self.n_batch:
            raise SpecchatError(f"cannot decode {total} rows in one batch of {self.n_batch}")
        logits = self._run(rows, want_all=True)
        out: list[np.ndarray] = []
        at = 0
        for _, tokens in rows:
            out.append(logits[at : at + len(tokens)].copy())
            at += len(tokens)
        return out

    def _run(self, rows: Sequence[tuple[int, Sequence[int]]], *, want_all: bool) -> np.ndarray:
        b = self._batch
        i = 0
        for slot, tokens in rows:
            m = len(tokens)
            start = len(self.tokens[slot])
            self._tok[i : i + m] = tokens
            self._pos[i : i + m] = np.arange(start, start + m, dtype=np.int32)
            self._want[i : i + m] = 1 if want_all else 0
            for j in range(i, i + m):
                b.seq_id[j][0] = slot
            i += m
        b.n_tokens = i
        threads = self.tuner.choose(i, id(self))
        if threads != self._threads:
            llama_cpp.llama_set_n_threads(self._ptr, threads, threads)
            self._threads = threads
        started = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ptr, b)
        if rc != 0:
            self._failed(rc, rows)
        self.tuner.observe(threads, i, time.perf_counter() - started, id(self))
        for slot, tokens in rows:
            self.tokens[slot].extend(int(t) for t in tokens)
        if not want_all:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        ptr = llama_cpp.llama_get_logits(self._ptr)
        return np.ctypeslib.as_array(ptr, shape=(i, self.n_vocab))

    def _failed(self, rc: int, rows: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Leave every slot as it was before the failed batch, then raise one line."""
        for slot, _ in rows:
            llama_cpp.llama_memory_seq_rm(self._memory, slot, len(self.tokens[slot]), -1)
        why = _DECODE_CODES.get(rc, f"code {rc}")
        n = sum(len(t) for _, t in rows)
        raise SpecchatError(f"{self.model.name}: llama.cpp could not decode a batch of {n} tokens ({why})")


class Slot:
    """One sequence of a :class:`MultiContext`, seen as the single-sequence loop sees a context.

    Decoding through it reads that sequence alone; the batched engine decodes
    several slots together with :meth:`MultiContext.step`.
    """

    def __init__(self, owner: MultiContext, slot: int) -> None:
        owner._check(slot)
        self.owner = owner
        self.slot = slot

    @property
    def n_ctx(self) -> int:
        return self.owner.n_ctx

    @property
    def tokens(self) -> list[int]:
        return self.owner.tokens[self.slot]

    def extend_to(self, tokens: Sequence[int]) -> int:
        return self.owner.extend_to(self.slot, tokens)

    def checkpoint(self, slot: str) -> None:
        """Nothing to save: a dense cache cuts anywhere."""

    def prepare_rollback(self, depth: int) -> None:
        """Nothing to prepare: a dense cache cuts anywhere."""

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        rows = self.owner.step([(self.slot, tokens)])[0]
        return rows if all_logits else rows[-1:]

    def truncate(self, n_keep: int) -> None:
        self.owner.truncate(self.slot, n_keep)

    # --- whole states, for the prompt cache (specchat.core.runtime.prompt_cache) -----
    observer = None  # nothing follows a slot's positions
    cuts_anywhere = True  # a dense cache

    def save_state(self) -> SavedState | None:
        """The sequence's whole memory as it is now; None when empty."""
        return self.owner.save_state(self.slot)

    def load_state(self, saved: SavedState) -> bool:
        """Make the sequence hold what ``saved`` held; False (and an empty sequence) if llama.cpp refuses it."""
        return self.owner.load_state(self.slot, saved)
