"""A llama.cpp context for one sequence: batched decode, logits as numpy, KV truncation.

The context remembers which tokens its KV cache holds, so callers can ask it
to "hold exactly this token list" and it reuses the longest common prefix.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np

from specchat.core.llama.model import Model
from specchat.core.types import SpecchatError


class ContextFullError(SpecchatError):
    """The tokens to decode do not fit in the context window."""


def default_threads() -> int:
    """Physical-ish core count: llama.cpp is slower with hyper-threads than without."""
    n = os.cpu_count() or 2
    return max(1, n // 2) if n > 4 else n


@dataclass(frozen=True)
class PerfCounters:
    """llama.cpp's own timing counters for a context (milliseconds)."""

    prompt_ms: float
    prompt_tokens: int
    eval_ms: float
    eval_tokens: int


class Context:
    """One KV sequence on a model. Not thread-safe: one worker owns it."""

    def __init__(self, model: Model, *, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512) -> None:
        self.model = model
        if n_ctx < 16:
            raise SpecchatError(f"context size must be at least 16 tokens, got {n_ctx}")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        threads = n_threads or default_threads()
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = False
        self._ptr = llama_cpp.llama_init_from_model(model.ptr, params)
        if not self._ptr:
            raise SpecchatError(f"llama.cpp could not create a {n_ctx}-token context (out of memory?)")
        self._memory = llama_cpp.llama_get_memory(self._ptr)
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ptr)
        self.n_batch: int = n_batch
        self.n_vocab: int = model.n_vocab
        self.tokens: list[int] = []  # what the KV cache holds, position by position
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

    def __del__(self) -> None:
        self.close()

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def truncate(self, n_keep: int) -> None:
        """Forget every cached position from ``n_keep`` on."""
        if n_keep < len(self.tokens):
            llama_cpp.llama_memory_seq_rm(self._memory, 0, n_keep, -1)
            del self.tokens[n_keep:]

    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        """Append ``tokens`` to the sequence; return logits rows (float32 view).

        With ``all_logits`` the result has one row per token, otherwise one row
        for the last token. The view is only valid until the next decode.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("nothing to decode")
        if self.n_past + n > self.n_ctx:
            raise ContextFullError(
                f"{self.n_past + n} tokens do not fit in the {self.n_ctx}-token context"
            )
        if all_logits and n > self.n_batch:
            raise SpecchatError(f"cannot score {n} tokens in one batch of {self.n_batch}")
        start = 0
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
            rc = llama_cpp.llama_decode(self._ptr, self._batch)
            if rc != 0:
                # Leave the cache as it was before this chunk, so the caller can recover.
                llama_cpp.llama_memory_seq_rm(self._memory, 0, self.n_past, -1)
                raise SpecchatError(f"llama_decode failed with code {rc}")
            self.tokens.extend(int(t) for t in chunk)
            start += m
        n_rows = n if all_logits else 1
        ptr = llama_cpp.llama_get_logits(self._ptr)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        """Make the cache hold ``tokens`` and return (logits after the last one, reused count).

        Reuses the longest common prefix with what the cache holds; at least the
        last token is decoded again so that its logits are available.
        """
        if not tokens:
            raise ValueError("cannot sync to an empty sequence")
        if len(tokens) > self.n_ctx:
            raise ContextFullError(f"{len(tokens)} tokens do not fit in the {self.n_ctx}-token context")
        reuse = common_prefix_len(self.tokens, tokens)
        reuse = min(reuse, len(tokens) - 1)
        self.truncate(reuse)
        logits = self.decode(tokens[reuse:])
        return logits[0], reuse

    def perf(self) -> PerfCounters:
        d = llama_cpp.llama_perf_context(self._ptr)
        return PerfCounters(d.t_p_eval_ms, d.n_p_eval, d.t_eval_ms, d.n_eval)

    def perf_reset(self) -> None:
        llama_cpp.llama_perf_context_reset(self._ptr)


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
