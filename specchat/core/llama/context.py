"""A llama.cpp context for one sequence: batched decode, logits as numpy, and taking positions back.

The context remembers which tokens its memory holds, so callers can ask it
to "hold exactly this token list" and it reuses the longest prefix it can.

Taking positions back ("cutting") is easy for a dense model: its KV cache
forgets any tail. A recurrent layer (Mamba, Gated DeltaNet, short
convolutions) keeps one state that has already absorbed every token, so
llama.cpp refuses most cuts (``llama_memory_seq_rm`` returns false). Every
cut here is checked, and a refused one is recovered, never ignored:

1. in place: llama.cpp keeps ``n_rs_seq`` snapshots of the recurrent state
   for the last tokens of the latest batch (architectures that support it),
   so a cut of up to that many of them works once after each decode;
2. from a checkpoint: the recurrent state saved earlier (``llama_state_seq_*``)
   is restored, the attention cache cut to match, and the tokens between
   the checkpoint and the cut decoded again;
3. from the start: with no usable checkpoint the sequence is cleared and
   decoded again (exact, the slowest).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import llama_cpp
import numpy as np

from specchat.core.llama.model import Model, ModelKind
from specchat.core.llama.threads import ThreadTuner
from specchat.core.types import MAX_DEPTH, SpecchatError, common_prefix_len

_STATE_PARTIAL_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent state without the attention cache
_DECODE_CODES = {1: "no room in the KV cache", 2: "aborted", -1: "invalid batch"}


class DecodeObserver(Protocol):
    """Follows a context's positions: told after each decoded chunk and after each cut."""

    def decoded(self, start: int, tokens: Sequence[int]) -> None: ...

    def rewound(self, n_keep: int) -> None: ...


class ContextFullError(SpecchatError):
    """The tokens to decode do not fit in the context window."""


def companion_params(target: Context, n_threads: int | None = None) -> llama_cpp.llama_context_params:
    """Context parameters for a context that drafts beside ``target`` and reads its state (MTP heads, a head file):
    the target's size and batch, one sequence."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = target.n_ctx
    params.n_batch = params.n_ubatch = target.n_batch
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = n_threads or target.tuner.current
    params.ctx_other = target._ptr
    result: llama_cpp.llama_context_params = params
    return result


def follow_threads(target: Context, ptr: Any) -> None:
    """Decode with a context tied to ``target`` (MTP heads, a head file) at the thread count the target uses now."""
    llama_cpp.llama_set_n_threads(ptr, target.tuner.current, target.tuner.current)


def can_checkpoint() -> bool:
    """Whether these bindings can save and restore one sequence's state (needed for recurrent models)."""
    return all(
        hasattr(llama_cpp, f)
        for f in ("llama_state_seq_get_size", "llama_state_seq_get_data", "llama_state_seq_set_data")
    )


def check_memory_support(model: Model) -> None:
    """Refuse (one line) a hybrid or recurrent model on bindings that cannot save its state."""
    if model.kind is not ModelKind.DENSE and not can_checkpoint():
        raise SpecchatError(
            f"{model.name} is a {model.kind.value} model ({model.arch}) and this llama.cpp build "
            f"(llama-cpp-python {llama_cpp.__version__}) cannot save its state, which taking back rejected "
            "drafts needs; a newer llama-cpp-python can"
        )


@dataclass(frozen=True)
class PerfCounters:
    """llama.cpp's own timing counters for a context (milliseconds)."""

    prompt_ms: float
    prompt_tokens: int
    eval_ms: float
    eval_tokens: int


@dataclass
class RollbackStats:
    """How this context's cuts were made, and what the recoveries cost."""

    in_place: int = 0  # cuts llama.cpp made itself (KV cache, or a recurrent snapshot)
    restores: int = 0  # cuts made by restoring a checkpoint
    restarts: int = 0  # cuts with no usable checkpoint: the sequence cleared
    replayed_tokens: int = 0  # tokens decoded again after a restore or a restart
    checkpoints: int = 0  # states saved
    checkpoint_bytes: int = 0  # size of the latest saved state
    seconds: float = 0.0  # spent saving, restoring and decoding again

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)


@dataclass(frozen=True, eq=False)
class SavedState:
    """A sequence's whole memory saved by :meth:`Context.save_state`: the tokens it holds and their state."""

    tokens: tuple[int, ...]
    data: ctypes.Array[ctypes.c_uint8]

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass
class _Checkpoint:
    pos: int  # the state after this many tokens
    data: ctypes.Array[ctypes.c_uint8]


class Context:
    """One sequence on a model. Not thread-safe: one worker owns it.

    ``rollback`` asks a hybrid or recurrent model for that many recurrent
    snapshots (``n_rs_seq``); ``rollback_depth`` is what llama.cpp granted
    (0 where the architecture cannot roll back in place).
    """

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        rollback: int = 0,
        tuner: ThreadTuner | None = None,
    ) -> None:
        self.model = model
        self.kind: ModelKind = model.kind
        if n_ctx < 16:
            raise SpecchatError(f"context size must be at least 16 tokens, got {n_ctx}")
        check_memory_support(model)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        want_rollback = rollback if self.kind is not ModelKind.DENSE and hasattr(params, "n_rs_seq") else 0
        if want_rollback > 0:
            params.n_rs_seq = want_rollback
            # The last n_rs_seq + 1 tokens of a batch must share one micro-batch for the snapshots.
            params.n_ubatch = params.n_batch = n_batch = max(n_batch, want_rollback + 1)
        # A count given is kept; without one, each decode's count is measured and chosen (ThreadTuner), with
        # the tuner of the context this one decodes in turn with, where it has one.
        self.tuner = tuner or ThreadTuner((n_threads,) if n_threads else None)
        self._threads = params.n_threads = params.n_threads_batch = self.tuner.current
        # Whether the latest decode ran (in part) on a thread count the tuner was trying, not the one in use: its
        # time says what that count costs, not what this context's decodes cost.
        self.tried = False
        self.tried_decodes = 0  # decodes (chunks) that ran on a tried count, ever: a span's tries show as a change
        params.no_perf = False
        self._ptr = llama_cpp.llama_init_from_model(model.ptr, params)
        if not self._ptr:
            raise SpecchatError(f"llama.cpp could not create a {n_ctx}-token context for {model.name} (out of memory?)")
        self._memory = llama_cpp.llama_get_memory(self._ptr)
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ptr)
        self.n_batch: int = n_batch
        self.n_vocab: int = model.n_vocab
        self.rollback_depth: int = int(llama_cpp.llama_n_rs_seq(self._ptr)) if want_rollback > 0 else 0
        self.tokens: list[int] = []  # what the memory holds, position by position
        self.stats = RollbackStats()
        self.restored = False  # whether the latest rewind restored a checkpoint
        self._snapshots = 0  # positions the latest batch lets llama.cpp cut in place (recurrent models)
        self._checkpoints: dict[str, _Checkpoint] = {}
        self.observer: DecodeObserver | None = None  # an MTP context that follows every position
        ext = hasattr(llama_cpp, "llama_state_seq_get_size_ext")
        self._partial_state = ext and self.kind is ModelKind.HYBRID  # attention cache cut, not saved
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        b = self._batch
        for i in range(n_batch):
            b.seq_id[i][0] = 0
            b.n_seq_id[i] = 1
        self._tok = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self._want = np.ctypeslib.as_array(b.logits, shape=(n_batch,))

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ptr)
            self._ptr = None
            self._checkpoints.clear()

    def __del__(self) -> None:
        self.close()

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    @property
    def in_place(self) -> bool:
        """Whether rejected drafts can be cut in place (dense, or recurrent snapshots)."""
        return self.kind is ModelKind.DENSE or self.rollback_depth > 0

    @property
    def cuts_anywhere(self) -> bool:
        """Whether any tail can be cut off (a dense model); a recurrent state only as far as its snapshots."""
        return self.kind is ModelKind.DENSE

    # --- taking positions back ------------------------------------------
    def truncate(self, n_keep: int) -> None:
        """Forget every position from ``n_keep`` on (recovering the state exactly if llama.cpp refuses the cut)."""
        if n_keep >= len(self.tokens):
            return
        keep = self.tokens[:n_keep]
        held = self.rewind(n_keep)
        if held < n_keep:
            started = time.perf_counter()
            self.decode(keep[held:])
            self.stats.replayed_tokens += n_keep - held
            self.stats.seconds += time.perf_counter() - started

    def rewind(self, n_keep: int) -> int:
        """Forget positions from ``n_keep`` on, or more where the memory cannot stop there; return how many remain.

        The caller decodes ``tokens[returned:n_keep]`` again (in the same batch
        as what it decodes next); :meth:`truncate` does that itself.
        """
        self.restored = False
        if n_keep >= len(self.tokens):
            return len(self.tokens)
        n_keep = max(n_keep, 0)
        if n_keep == 0:
            self._clear()
            return 0
        cut = len(self.tokens) - n_keep
        if self.kind is ModelKind.DENSE or cut <= self._snapshots:
            if llama_cpp.llama_memory_seq_rm(self._memory, 0, n_keep, -1):
                self._forget_from(n_keep)
                self.stats.in_place += 1
                return n_keep
        started = time.perf_counter()
        best = max((c for c in self._checkpoints.values() if c.pos <= n_keep), key=lambda c: c.pos, default=None)
        if best is not None:
            self._restore(best)
            self.stats.restores += 1
            self.restored = True
        else:
            self._clear()
            self.stats.restarts += 1
        self.stats.seconds += time.perf_counter() - started
        return len(self.tokens)

    def prepare_rollback(self, depth: int) -> None:
        """The next decode appends up to ``depth`` + 1 tokens and may be cut back by up to ``depth``.

        Saves a checkpoint unless that cut can be made in place.
        """
        if depth > self.rollback_depth and self.kind is not ModelKind.DENSE:
            self.checkpoint("round")

    def checkpoint(self, slot: str) -> None:
        """Save the recurrent state as it is now under ``slot`` (a no-op for dense models)."""
        if self.kind is ModelKind.DENSE or not self.tokens:
            return
        old = self._checkpoints.get(slot)
        if old is not None and old.pos == len(self.tokens):
            return  # valid checkpoints are dropped by any cut below them, so this one is the same state
        started = time.perf_counter()
        if self._partial_state:
            size = llama_cpp.llama_state_seq_get_size_ext(self._ptr, 0, _STATE_PARTIAL_ONLY)
            data = (ctypes.c_uint8 * size)()
            got = llama_cpp.llama_state_seq_get_data_ext(self._ptr, data, size, 0, _STATE_PARTIAL_ONLY)
        else:
            size = llama_cpp.llama_state_seq_get_size(self._ptr, 0)
            data = (ctypes.c_uint8 * size)()
            got = llama_cpp.llama_state_seq_get_data(self._ptr, data, size, 0)
        if got != size:
            raise SpecchatError(f"{self.model.name}: llama.cpp saved {got} of {size} bytes of its state")
        self._checkpoints[slot] = _Checkpoint(len(self.tokens), data)
        self.stats.checkpoints += 1
        self.stats.checkpoint_bytes = size
        self.stats.seconds += time.perf_counter() - started

    def _restore(self, ck: _Checkpoint) -> None:
        size = len(ck.data)
        if self._partial_state:
            got = llama_cpp.llama_state_seq_set_data_ext(self._ptr, ck.data, size, 0, _STATE_PARTIAL_ONLY)
        else:
            got = llama_cpp.llama_state_seq_set_data(self._ptr, ck.data, size, 0)
        # With the recurrent state back at ck.pos, the cut from there on is not partial for it any more.
        if got == 0 or not llama_cpp.llama_memory_seq_rm(self._memory, 0, ck.pos, -1):
            self._clear()
            raise SpecchatError(
                f"{self.model.name} ({self.kind.value}): llama.cpp could not restore the state "
                f"saved at position {ck.pos}; the cache was cleared, send the message again"
            )
        self._forget_from(ck.pos)

    def _forget_from(self, n_keep: int) -> None:
        del self.tokens[n_keep:]
        self._snapshots = 0  # a snapshot serves once, and only right after its batch
        for slot in [s for s, c in self._checkpoints.items() if c.pos > n_keep]:
            del self._checkpoints[slot]
        if self.observer is not None:
            self.observer.rewound(n_keep)

    def _clear(self) -> None:
        if not llama_cpp.llama_memory_seq_rm(self._memory, 0, -1, -1):  # a whole sequence never refuses
            llama_cpp.llama_memory_clear(self._memory, True)
        self.tokens.clear()
        self._snapshots = 0
        self._checkpoints.clear()
        if self.observer is not None:
            self.observer.rewound(0)

    # --- whole states, for a cache of earlier prompts ---------------------
    def save_state(self) -> SavedState | None:
        """The sequence's whole memory as it is now (its tokens and llama.cpp's bytes); None when empty."""
        if not self.tokens:
            return None
        size = llama_cpp.llama_state_seq_get_size(self._ptr, 0)
        data = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(self._ptr, data, size, 0) != size:
            return None
        return SavedState(tuple(self.tokens), data)

    def load_state(self, saved: SavedState) -> bool:
        """Make the memory hold what ``saved`` held; False (and an empty memory) if llama.cpp refuses it."""
        self._clear()
        if llama_cpp.llama_state_seq_set_data(self._ptr, saved.data, len(saved.data), 0) == 0:
            self._clear()
            return False
        self.tokens.extend(saved.tokens)
        return True

    # --- decoding ---------------------------------------------------------
    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        """Append ``tokens`` to the sequence; return logits rows (float32 view).

        With ``all_logits`` the result has one row per token, otherwise one row
        for the last token. The view is only valid until the next decode.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("nothing to decode")
        if self.n_past + n > self.n_ctx:
            raise ContextFullError(f"{self.n_past + n} tokens do not fit in the {self.n_ctx}-token context")
        if all_logits and n > self.n_batch:
            raise SpecchatError(f"cannot score {n} tokens in one batch of {self.n_batch}")
        start = 0
        self.tried = False
        while start < n:
            chunk = tokens[start : start + self.n_batch]
            m = len(chunk)
            last_chunk = start + m >= n
            self._tok[:m] = chunk
            self._pos[:m] = np.arange(self.n_past, self.n_past + m, dtype=np.int32)
            self._want[:m] = 1 if all_logits else 0
            if last_chunk:
                self._want[m - 1] = 1
            self._batch.n_tokens = m
            threads = self.tuner.choose(m, id(self))
            if threads != self.tuner.current:
                self.tried = True
                self.tried_decodes += 1
            if threads != self._threads:
                llama_cpp.llama_set_n_threads(self._ptr, threads, threads)
                self._threads = threads
            started = time.perf_counter()
            rc = llama_cpp.llama_decode(self._ptr, self._batch)
            if rc != 0:
                self._decode_failed(rc, m)
            self.tuner.observe(threads, m, time.perf_counter() - started, id(self))
            at = self.n_past
            self.tokens.extend(int(t) for t in chunk)
            self._snapshots = min(m - 1, self.rollback_depth)
            if self.observer is not None:
                self.observer.decoded(at, chunk)
            start += m
        n_rows = n if all_logits else 1
        ptr = llama_cpp.llama_get_logits(self._ptr)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))

    def _decode_failed(self, rc: int, m: int) -> None:
        """Leave the memory as it was before the failed chunk (or empty), then raise one line."""
        at = self.n_past
        self._snapshots = 0
        cleared = ""
        if not llama_cpp.llama_memory_seq_rm(self._memory, 0, at, -1):
            self._clear()  # a recurrent state cannot drop the failed chunk alone
            cleared = "; the cache was cleared"
        why = _DECODE_CODES.get(rc, f"code {rc}")
        raise SpecchatError(
            f"{self.model.name}: llama.cpp could not decode {m} tokens at position {at} ({why}){cleared}"
        )

    def extend_to(self, tokens: Sequence[int]) -> int:
        """Make the memory hold exactly ``tokens`` (no logits); return how many were reused."""
        reuse = self.rewind(common_prefix_len(self.tokens, tokens))
        if len(tokens) > reuse:
            self.decode(tokens[reuse:])
        return reuse

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        """Make the memory hold ``tokens`` and return (logits after the last one, reused count).

        Reuses the longest common prefix it can; at least the last token is
        decoded again so that its logits are available.
        """
        if not tokens:
            raise ValueError("cannot sync to an empty sequence")
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"{len(tokens)} tokens do not fit in the {self.n_ctx}-token context")
        reuse = min(common_prefix_len(self.tokens, tokens), len(tokens) - 1)
        reuse = self.rewind(reuse)
        logits = self.decode(tokens[reuse:])
        return logits[0], reuse

    def perf(self) -> PerfCounters:
        d = llama_cpp.llama_perf_context(self._ptr)
        return PerfCounters(d.t_p_eval_ms, d.n_p_eval, d.t_eval_ms, d.n_eval)

    def perf_reset(self) -> None:
        llama_cpp.llama_perf_context_reset(self._ptr)


@dataclass(frozen=True)
class MemoryInfo:
    """What a model's memory allows: its kind and how rejected drafts are taken back."""

    arch: str
    kind: ModelKind
    rollback: int  # positions llama.cpp can cut in place after a batch (0: none; dense: any)
    n_layer_nextn: int  # MTP (NextN) layers in the file

    @property
    def in_place(self) -> bool:
        return self.kind is ModelKind.DENSE or self.rollback > 0

    def describe(self) -> str:
        """One line, e.g. ``hybrid (qwen35): rolls back up to 16 drafts in place``."""
        if self.kind is ModelKind.DENSE:
            how = "cuts its KV cache anywhere"
        elif self.rollback > 0:
            how = f"rolls back up to {self.rollback} drafts in place (deeper: from a saved state)"
        else:
            how = "cannot roll back in place: rejected drafts are undone from a saved state"
        mtp = f"; {self.n_layer_nextn} MTP layer{'s' if self.n_layer_nextn != 1 else ''}" if self.n_layer_nextn else ""
        return f"{self.kind.value} ({self.arch}): {how}{mtp}"

    def to_json(self) -> dict[str, object]:
        return {
            "arch": self.arch,
            "kind": self.kind.value,
            "rollback": self.rollback,
            "in_place": self.in_place,
            "mtp_layers": self.n_layer_nextn,
        }


def probe_memory(path: str | os.PathLike[str]) -> MemoryInfo:
    """Kind and rollback room of the model at ``path``, without reading its weights.

    The rollback room is asked of llama.cpp itself: a weightless context is
    created with ``n_rs_seq`` snapshots and llama.cpp keeps them only for
    architectures whose recurrent layers can be rolled back.
    """
    model = Model(path, no_alloc=True)
    try:
        rollback = 0
        if model.kind is not ModelKind.DENSE:
            ctx = Context(model, n_ctx=64, n_batch=64, rollback=MAX_DEPTH, n_threads=1)
            rollback = ctx.rollback_depth
            ctx.close()
        return MemoryInfo(model.arch, model.kind, rollback, model.n_layer_nextn)
    finally:
        model.close()


class MtpContext:
    """The target's own MTP (NextN) heads as a drafter's context.

    llama.cpp runs the MTP block in a context of its own (``LLAMA_CONTEXT_TYPE_MTP``,
    tied to the target with ``ctx_other``), with its own KV cache for that
    block. The block at position p reads token p and the target's last hidden
    state at p - 1 and predicts token p + 1. So this object follows the target
    (as its :class:`DecodeObserver`): every chunk the target decodes is fed
    to the MTP block with the target's hidden states (``embeddings_nextn``),
    every cut of the target cuts it too, and drafting continues from the
    target's state at the last committed token, each further draft fed with
    the MTP block's own hidden state.
    """

    _HISTORY = 512  # target hidden states kept by position, for cuts back into earlier batches

    def __init__(self, target: Context, *, n_threads: int | None = None) -> None:
        from llama_cpp import llama_cpp_ext

        self._ext = llama_cpp_ext
        model = target.model
        if model.n_layer_nextn <= 0:
            raise SpecchatError(
                f"{model.name} has no MTP heads (no NextN layers); choose a draft model, n-gram lookup or none"
            )
        if not getattr(model, "mtp_loaded", False):
            raise SpecchatError(f"{model.name} was loaded without its MTP layers")
        params = companion_params(target, n_threads)
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        self._ptr = llama_cpp.llama_init_from_model(model.ptr, params)
        if not self._ptr:
            raise SpecchatError(f"llama.cpp could not create the MTP context of {model.name}")
        self.target = target
        self.n_vocab = model.n_vocab
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(model.ptr)) or int(llama_cpp.llama_model_n_embd(model.ptr))
        self.n_batch = target.n_batch
        self._memory = llama_cpp.llama_get_memory(self._ptr)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, self.n_embd, 1)
        # llama_batch_init gives a batch with embeddings or tokens; the MTP block reads both.
        self._tokens_buf = (llama_cpp.llama_token * self.n_batch)()
        self._batch.token = self._tokens_buf
        self._tok = np.ctypeslib.as_array(self._tokens_buf, shape=(self.n_batch,))
        self._pos = np.ctypeslib.as_array(self._batch.pos, shape=(self.n_batch,))
        self._want = np.ctypeslib.as_array(self._batch.logits, shape=(self.n_batch,))
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(self.n_batch, self.n_embd))
        for i in range(self.n_batch):
            self._batch.seq_id[i][0] = 0
            self._batch.n_seq_id[i] = 1
        self.n_held = 0  # positions in the MTP block's cache
        self._hidden: OrderedDict[int, np.ndarray] = OrderedDict()  # target hidden state after position p
        self._draft_at = 0
        llama_cpp_ext.llama_set_embeddings_nextn(target._ptr, True, False)  # every row's hidden state
        llama_cpp_ext.llama_set_embeddings_nextn(self._ptr, True, True)  # the rows with logits
        if target.tokens:
            target.truncate(0)  # the MTP cache must see every position the target holds
        target.observer = self

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            if self.target.observer is self:
                self.target.observer = None
            if self.target._ptr:
                self._ext.llama_set_embeddings_nextn(self.target._ptr, False, False)
            self._batch.token = ctypes.POINTER(llama_cpp.llama_token)()  # ours, not the batch's to free
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        self.close()

    # --- following the target ---------------------------------------------
    def decoded(self, start: int, tokens: Sequence[int]) -> None:
        m = len(tokens)
        ptr = self._ext.llama_get_embeddings_nextn(self.target._ptr)
        if not ptr:
            raise SpecchatError(f"{self.target.model.name}: llama.cpp gave no hidden states for the MTP heads")
        hidden = np.ctypeslib.as_array(ptr, shape=(m, self.n_embd))
        self._cut(start)
        if self.n_held == start and (start == 0 or start - 1 in self._hidden):
            self._tok[:m] = tokens
            self._pos[:m] = np.arange(start, start + m, dtype=np.int32)
            self._want[:m] = 0
            self._embd[0] = self._hidden[start - 1] if start > 0 else 0.0
            self._embd[1:m] = hidden[: m - 1]
            self._run(m)
            self.n_held = start + m
        for i in range(m):
            self._hidden[start + i] = hidden[i].copy()
        while len(self._hidden) > self._HISTORY:
            self._hidden.popitem(last=False)

    def rewound(self, n_keep: int) -> None:
        self._cut(n_keep)
        for pos in [p for p in self._hidden if p >= n_keep]:
            del self._hidden[pos]

    def _cut(self, n_keep: int) -> None:
        if self.n_held > n_keep:
            if not llama_cpp.llama_memory_seq_rm(self._memory, 0, n_keep, -1):  # attention only: never refused
                llama_cpp.llama_memory_seq_rm(self._memory, 0, -1, -1)
                n_keep = 0
            self.n_held = n_keep

    def _run(self, m: int) -> None:
        self._batch.n_tokens = m
        follow_threads(self.target, self._ptr)
        rc = llama_cpp.llama_decode(self._ptr, self._batch)
        if rc != 0:
            self._cut(int(self._pos[0]))
            why = _DECODE_CODES.get(rc, f"code {rc}")
            raise SpecchatError(f"{self.target.model.name}: llama.cpp could not run its MTP heads ({why})")

    # --- drafting ---------------------------------------------------------
    def begin(self, token: int, pos: int) -> np.ndarray | None:
        """Logits of the heads' guess after ``token`` at ``pos`` (the target holds ``pos`` positions).

        None when the target's hidden state there is not known (the heads then sit the round out).
        """
        if pos != self.target.n_past or self.n_held < pos or (pos > 0 and pos - 1 not in self._hidden):
            return None
        self._cut(pos)
        return self._step(token, pos, self._hidden[pos - 1] if pos > 0 else None)

    def step(self, token: int) -> np.ndarray:
        """Logits after one more drafted ``token``, fed with the heads' own hidden state."""
        ptr = self._ext.llama_get_embeddings_nextn_ith(self._ptr, 0)
        if not ptr:
            raise SpecchatError(f"{self.target.model.name}: llama.cpp gave no hidden state from its MTP heads")
        return self._step(token, self._draft_at, np.ctypeslib.as_array(ptr, shape=(self.n_embd,)))

    def end(self, pos: int) -> None:
        """Forget the drafted positions: the MTP cache holds what the target holds again."""
        self._cut(pos)

    def _step(self, token: int, pos: int, hidden: np.ndarray | None) -> np.ndarray:
        self._tok[0] = token
        self._pos[0] = pos
        self._want[0] = 1
        self._embd[0] = hidden if hidden is not None else 0.0
        self._run(1)
        self.n_held = pos + 1
        self._draft_at = pos + 1
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ptr, 0), shape=(self.n_vocab,))
