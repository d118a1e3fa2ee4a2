"""A llama.cpp context holding several sequences at once: one batch carries every sequence's tokens.

Each sequence has its own slot (a llama.cpp sequence id) in one KV buffer of
``n_seq * n_ctx`` cells (``kv_unified``); a slot is held to ``n_ctx``
positions, so the slots together never need more than the buffer and a long
prompt never takes another reply's room mid-reply. One :meth:`MultiContext.step` decodes
the tokens of several slots in one ``llama_decode`` (each row with its slot's
id and its position) and returns every row's logits, per slot.

Cutting one sequence back touches that sequence alone. A dense model's
cache forgets any tail (``llama_memory_seq_rm``). A hybrid or recurrent
model keeps one recurrent state per sequence that has absorbed every token,
so each slot is cut back as the single-sequence context cuts
(:class:`~specchat.core.llama.context.Context`): in place with llama.cpp's
recurrent snapshots (``n_rs_seq``, kept per sequence id: each slot's last
batch's tail), else from a checkpoint of that slot's recurrent state
(``llama_state_seq_*`` on its sequence id) and the kept tokens after it
decoded again (the batched engine decodes every slot's together, after the
round's last cut: :meth:`MultiContext.replays_together`), else from the
start. Each slot counts its cuts
(:class:`~specchat.core.llama.context.RollbackStats`).

A released slot keeps what it holds: the next sequence is given the free slot
that shares the longest prefix with its prompt, so a conversation's next turn
reads only what is new (a prompt cache per conversation, across slots).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import llama_cpp
import numpy as np

from specchat.core.llama.context import ContextFullError, RollbackStats, SavedState, can_checkpoint
from specchat.core.llama.model import Model, ModelKind
from specchat.core.llama.threads import ThreadTuner
from specchat.core.types import MAX_DEPTH, SpecchatError, common_prefix_len

_DECODE_CODES = {1: "no room in the KV cache", 2: "aborted", -1: "invalid batch"}
_STATE_PARTIAL_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent state without the attention cache
MAX_SEQUENCES = 64


def check_batchable(model: Model) -> None:
    """Refuse (one line) a target whose sequences cannot be cut back one by one: a hybrid or recurrent model on
    bindings that cannot save one sequence's state."""
    if model.kind is not ModelKind.DENSE and not can_checkpoint():
        raise SpecchatError(
            f"{model.name} is a {model.kind.value} model ({model.arch}) and this llama.cpp build "
            f"(llama-cpp-python {llama_cpp.__version__}) cannot save one sequence's state, which taking back "
            "rejected drafts in a shared batch needs; use --parallel 1"
        )


@dataclass
class _Checkpoint:
    pos: int  # the slot's recurrent state after this many tokens
    data: ctypes.Array[ctypes.c_uint8]


class MultiContext:
    """Up to ``n_seq`` sequences on one model, ``n_ctx`` positions each. Not thread-safe: one worker owns it.

    ``rollback`` asks a hybrid or recurrent model for that many recurrent
    snapshots per sequence; ``rollback_depth`` is what llama.cpp granted
    (0 where the architecture cannot roll back in place).
    """

    def __init__(
        self,
        model: Model,
        *,
        n_seq: int,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_threads: int | None = None,
        tuner: ThreadTuner | None = None,
        rollback: int = MAX_DEPTH,
    ) -> None:
        check_batchable(model)
        if not 1 <= n_seq <= MAX_SEQUENCES:
            raise SpecchatError(f"the number of sequences must be 1-{MAX_SEQUENCES}, got {n_seq}")
        if n_ctx < 16:
            raise SpecchatError(f"context size must be at least 16 tokens, got {n_ctx}")
        self.model = model
        self.kind: ModelKind = model.kind
        params = llama_cpp.llama_context_default_params()
        params.n_seq_max = n_seq
        want_rollback = rollback if self.kind is not ModelKind.DENSE and hasattr(params, "n_rs_seq") else 0
        # One KV buffer for all sequences: a batch over several sequences is then one graph, where a stream
        # per sequence splits it (measured on the demo target, 4 sequences: 121-125 against 78-90 tokens/s).
        # Each sequence is held to n_ctx positions here, so together they never need more than the buffer.
        params.kv_unified = True
        params.n_ctx = n_ctx * n_seq
        if want_rollback > 0:
            params.n_rs_seq = want_rollback
            # The last n_rs_seq + 1 tokens of each sequence in a batch must share one micro-batch.
            n_batch = max(n_batch, want_rollback + 1)
        params.n_batch = params.n_ubatch = n_batch
        self.tuner = tuner or ThreadTuner((n_threads,) if n_threads else None)
        self._threads = params.n_threads = params.n_threads_batch = self.tuner.current
        self.tried = False  # the latest decode ran on a thread count the tuner was trying (as Context.tried)
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
        self.rollback_depth: int = int(llama_cpp.llama_n_rs_seq(self._ptr)) if want_rollback > 0 else 0
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]  # what each slot's memory holds
        self.stats = [RollbackStats() for _ in range(n_seq)]  # how each slot's cuts were made
        # Per slot: positions its latest batch lets llama.cpp cut in place, and its saved recurrent states.
        self._snapshots = [0] * n_seq
        self._checkpoints: list[dict[str, _Checkpoint]] = [{} for _ in range(n_seq)]
        self._replays: dict[int, list[int]] | None = None  # per slot, kept tokens to decode again (held back)
        self._partial_state = self.kind is ModelKind.HYBRID and hasattr(llama_cpp, "llama_state_seq_get_size_ext")
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
            for kept in self._checkpoints:
                kept.clear()

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
        llama_cpp.llama_memory_seq_rm(self._memory, slot, -1, -1)  # a whole sequence never refuses
        self.tokens[slot].clear()
        self._snapshots[slot] = 0
        self._checkpoints[slot].clear()
        if self._replays is not None:
            self._replays.pop(slot, None)

    def truncate(self, slot: int, n_keep: int) -> None:
        """Forget ``slot``'s positions from ``n_keep`` on (recovering its state exactly where llama.cpp refuses the
        cut: the kept tokens after the restored point are decoded again in this slot, now or, within
        :meth:`replays_together`, with the other slots' on leaving it)."""
        self._check(slot)
        held = self.tokens[slot]
        if n_keep >= len(held):
            return
        keep = held[: max(n_keep, 0)]
        got = self.rewind(slot, n_keep)
        if got < len(keep):
            self.stats[slot].replayed_tokens += len(keep) - got
            if self._replays is not None:
                self._replays[slot] = keep[got:]
                return
            started = time.perf_counter()
            self._read(slot, keep[got:])
            self.stats[slot].seconds += time.perf_counter() - started

    @contextmanager
    def replays_together(self) -> Iterator[None]:
        """Within it, a cut that restores a slot's saved state (or starts it afresh) holds back decoding the kept
        tokens again; on leaving, every slot's held-back tokens are decoded together, in as few batches as fit.

        So one round's cuts in place are all made before any slot decodes again (a decode spends the others'
        snapshots), and the recoveries of several slots share a decode. Nothing else may decode within it."""
        self._replays = {}
        try:
            yield
        finally:
            replays, self._replays = self._replays, None
            self._replay(replays)

    def _replay(self, replays: dict[int, list[int]]) -> None:
        started = time.perf_counter()
        rows: list[tuple[int, Sequence[int]]] = []
        for slot, tokens in replays.items():
            if len(tokens) > self.n_batch:
                self._read(slot, tokens)  # a long one (a sequence started afresh) alone, in chunks
                continue
            if sum(len(t) for _, t in rows) + len(tokens) > self.n_batch:
                self._run(rows, want_all=False)
                rows = []
            rows.append((slot, tokens))
        if rows:
            self._run(rows, want_all=False)
        share = (time.perf_counter() - started) / max(len(replays), 1)
        for slot in replays:
            self.stats[slot].seconds += share  # an equal share of the shared decodes' time

    def rewind(self, slot: int, n_keep: int) -> int:
        """Forget ``slot``'s positions from ``n_keep`` on, or more where its memory cannot stop there; return how
        many remain (the caller decodes the rest of what it keeps again; :meth:`truncate` does)."""
        self._check(slot)
        held = self.tokens[slot]
        if n_keep >= len(held):
            return len(held)
        n_keep = max(n_keep, 0)
        stats = self.stats[slot]
        if n_keep == 0:
            self.clear(slot)
            return 0
        cut = len(held) - n_keep
        if self.kind is ModelKind.DENSE or cut <= self._snapshots[slot]:
            if llama_cpp.llama_memory_seq_rm(self._memory, slot, n_keep, -1):
                self._forget_from(slot, n_keep)
                stats.in_place += 1
                return n_keep
        started = time.perf_counter()
        kept = self._checkpoints[slot].values()
        best = max((c for c in kept if c.pos <= n_keep), key=lambda c: c.pos, default=None)
        if best is not None:
            self._restore(slot, best)
            stats.restores += 1
        else:
            self.clear(slot)
            stats.restarts += 1
        stats.seconds += time.perf_counter() - started
        return len(held)

    def prepare_rollback(self, slot: int, depth: int) -> None:
        """``slot``'s next decode appends up to ``depth`` + 1 tokens and may be cut back by up to ``depth``: save a
        checkpoint of its recurrent state unless that cut can be made in place."""
        if depth > self.rollback_depth and self.kind is not ModelKind.DENSE:
            self.checkpoint(slot, "round")

    def checkpoint(self, slot: int, name: str) -> None:
        """Save ``slot``'s recurrent state as it is now under ``name`` (a no-op for a dense model)."""
        self._check(slot)
        if self.kind is ModelKind.DENSE or not self.tokens[slot]:
            return
        kept = self._checkpoints[slot]
        old = kept.get(name)
        if old is not None and old.pos == len(self.tokens[slot]):
            return  # any cut below a checkpoint drops it, so this one is the same state
        started = time.perf_counter()
        if self._partial_state:
            size = llama_cpp.llama_state_seq_get_size_ext(self._ptr, slot, _STATE_PARTIAL_ONLY)
            data = (ctypes.c_uint8 * size)()
            got = llama_cpp.llama_state_seq_get_data_ext(self._ptr, data, size, slot, _STATE_PARTIAL_ONLY)
        else:
            size = llama_cpp.llama_state_seq_get_size(self._ptr, slot)
            data = (ctypes.c_uint8 * size)()
            got = llama_cpp.llama_state_seq_get_data(self._ptr, data, size, slot)
        if got != size:
            raise SpecchatError(f"{self.model.name}: llama.cpp saved {got} of {size} bytes of a sequence's state")
        kept[name] = _Checkpoint(len(self.tokens[slot]), data)
        stats = self.stats[slot]
        stats.checkpoints += 1
        stats.checkpoint_bytes = size
        stats.seconds += time.perf_counter() - started

    def _restore(self, slot: int, ck: _Checkpoint) -> None:
        size = len(ck.data)
        if self._partial_state:
            got = llama_cpp.llama_state_seq_set_data_ext(self._ptr, ck.data, size, slot, _STATE_PARTIAL_ONLY)
        else:
            got = llama_cpp.llama_state_seq_set_data(self._ptr, ck.data, size, slot)
        # With the recurrent state back at ck.pos, the cut from there on is no partial one for it any more.
        if got == 0 or not llama_cpp.llama_memory_seq_rm(self._memory, slot, ck.pos, -1):
            self.clear(slot)
            raise SpecchatError(
                f"{self.model.name} ({self.kind.value}): llama.cpp could not restore a sequence's state "
                f"saved at position {ck.pos}; its cache was cleared, send the message again"
            )
        self._forget_from(slot, ck.pos)

    def _forget_from(self, slot: int, n_keep: int) -> None:
        del self.tokens[slot][n_keep:]
        self._snapshots[slot] = 0  # a snapshot serves once, and only right after its batch
        kept = self._checkpoints[slot]
        for name in [n for n, c in kept.items() if c.pos > n_keep]:
            del kept[name]

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
        self._snapshots[slot] = 0
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
        self._check(slot)
        reuse = self.rewind(slot, common_prefix_len(self.tokens[slot], tokens))
        self._read(slot, tokens[reuse:])
        return reuse

    def _read(self, slot: int, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to ``slot`` in chunks of a batch, no logits."""
        start = 0
        while start < len(tokens):
            chunk = list(tokens[start : start + self.n_batch])
            self._run([(slot, chunk)], want_all=False)
            start += len(chunk)

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
        self.tried = threads != self.tuner.current
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
        # Only a slot in this batch can be cut in place next; the others' snapshots are not relied on after it.
        self._snapshots = [0] * self.n_seq
        for slot, tokens in rows:
            self._snapshots[slot] = min(len(tokens) - 1, self.rollback_depth)
        if not want_all:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        ptr = llama_cpp.llama_get_logits(self._ptr)
        return np.ctypeslib.as_array(ptr, shape=(i, self.n_vocab))

    def _failed(self, rc: int, rows: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Leave every slot as it was before the failed batch (or, where a recurrent state cannot drop it, empty),
        then raise one line."""
        self._snapshots = [0] * self.n_seq
        cleared = ""
        for slot, _ in rows:
            if not llama_cpp.llama_memory_seq_rm(self._memory, slot, len(self.tokens[slot]), -1):
                self.clear(slot)
                cleared = "; the caches of its sequences were cleared"
        why = _DECODE_CODES.get(rc, f"code {rc}")
        n = sum(len(t) for _, t in rows)
        raise SpecchatError(f"{self.model.name}: llama.cpp could not decode a batch of {n} tokens ({why}){cleared}")


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

    @property
    def tried(self) -> bool:
        return self.owner.tried

    def extend_to(self, tokens: Sequence[int]) -> int:
        return self.owner.extend_to(self.slot, tokens)

    @property
    def stats(self) -> RollbackStats:
        """How this sequence's cuts were made."""
        return self.owner.stats[self.slot]

    def checkpoint(self, slot: str) -> None:
        """Save the sequence's recurrent state under ``slot`` (a no-op for a dense model)."""
        self.owner.checkpoint(self.slot, slot)

    def prepare_rollback(self, depth: int) -> None:
        """The next decode may be cut back by up to ``depth``: save a checkpoint unless that cut can be made in
        place."""
        self.owner.prepare_rollback(self.slot, depth)

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        rows = self.owner.step([(self.slot, tokens)])[0]
        return rows if all_logits else rows[-1:]

    def truncate(self, n_keep: int) -> None:
        self.owner.truncate(self.slot, n_keep)

    # --- whole states, for the prompt cache (specchat.core.runtime.prompt_cache) -----
    observer = None  # nothing follows a slot's positions

    @property
    def cuts_anywhere(self) -> bool:
        """Whether any tail can be cut off (a dense model); a recurrent state only as far as its snapshots."""
        return self.owner.kind is ModelKind.DENSE

    def save_state(self) -> SavedState | None:
        """The sequence's whole memory as it is now; None when empty."""
        return self.owner.save_state(self.slot)

    def load_state(self, saved: SavedState) -> bool:
        """Make the sequence hold what ``saved`` held; False (and an empty sequence) if llama.cpp refuses it."""
        return self.owner.load_state(self.slot, saved)
