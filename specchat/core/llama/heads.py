"""Drafter heads that read the target's hidden states: EAGLE-3, DFlash (and DFlash2) and DSpark.

A head is a small GGUF (``general.architecture`` ``eagle3`` or ``dflash``)
that drafts from features of the target's own layers, so its llama.cpp
context is tied to the target's (``ctx_other``: it may share the target's
token embeddings and lm head) and it follows every decode and cut of the
target, as llama.cpp's ``common/speculative.cpp`` (``draft-eagle3``,
``draft-dflash``, ``draft-dspark``) drives it:

* the target is asked for the inputs of the head's target layers
  (``llama_set_embeddings_layer_inp``) and, after each decoded chunk, they
  are fed to the head: EAGLE-3 fuses them in its encoder (one ``g`` row per
  position) and decodes the pairs (token p + 1, g p); DFlash injects them
  into its KV cache at the target's positions;
* drafting starts from the target's state at the last committed token:
  EAGLE-3 chains one decode per draft, fed with its own pre-norm hidden
  state; DFlash decodes one block ``[last, mask, ...]`` and reads every
  position's logits at once (DFlash2: a selector lattice of top-k
  candidates with transition scores; DSpark: logits with a Markov bias and
  a per-position confidence).

The calls come from ``llama-ext.h`` (C++ symbols, bound here on the loaded
library) and the extended batch API of ``llama.h``. A build without one of
them gives a one-line :class:`SpecchatError` naming it.
"""

from __future__ import annotations

import ctypes
import enum
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import llama_cpp
import numpy as np

from specchat.core.head_formats import (
    BLOCK,
    CHAINED,
    HeadFormat,
    HeadHeader,
    head_archs,
    head_format,
    marking_tensors,
    read_format,
)
from specchat.core.llama.context import _DECODE_CODES, Context, companion_params, follow_threads
from specchat.core.llama.model import Model
from specchat.core.types import SpecchatError

_ctx_p = llama_cpp.llama_context_p_ctypes
_model_p = llama_cpp.llama_model_p_ctypes
_f32_p = ctypes.POINTER(ctypes.c_float)

# name -> (exported names to try: C, then the Itanium C++ mangling), argtypes, restype
_EXT: dict[str, tuple[tuple[str, ...], list[Any], Any]] = {
    "llama_set_embeddings_layer_inp": (
        ("llama_set_embeddings_layer_inp", "_Z30llama_set_embeddings_layer_inpP13llama_contextjb"),
        [_ctx_p, ctypes.c_uint32, ctypes.c_bool],
        None,
    ),
    "llama_get_embeddings_layer_inp": (
        ("llama_get_embeddings_layer_inp", "_Z30llama_get_embeddings_layer_inpP13llama_contextj"),
        [_ctx_p, ctypes.c_uint32],
        _f32_p,
    ),
    "llama_set_embeddings_nextn": (
        ("llama_set_embeddings_nextn", "_Z26llama_set_embeddings_nextnP13llama_contextbb"),
        [_ctx_p, ctypes.c_bool, ctypes.c_bool],
        None,
    ),
    "llama_get_embeddings_nextn": (
        ("llama_get_embeddings_nextn", "_Z26llama_get_embeddings_nextnP13llama_context"),
        [_ctx_p],
        _f32_p,
    ),
    "llama_get_embeddings_nextn_ith": (
        ("llama_get_embeddings_nextn_ith", "_Z30llama_get_embeddings_nextn_ithP13llama_contexti"),
        [_ctx_p, ctypes.c_int32],
        _f32_p,
    ),
    "llama_model_target_layer_ids": (
        ("llama_model_target_layer_ids", "_Z28llama_model_target_layer_idsPK11llama_model"),
        [_model_p],
        ctypes.POINTER(ctypes.c_int32),
    ),
    "llama_model_target_layer_ids_n": (
        ("llama_model_target_layer_ids_n", "_Z30llama_model_target_layer_ids_nPK11llama_model"),
        [_model_p],
        ctypes.c_uint32,
    ),
    "llama_model_dflash_selector_top_k": (
        ("llama_model_dflash_selector_top_k", "_Z33llama_model_dflash_selector_top_kPK11llama_model"),
        [_model_p],
        ctypes.c_int32,
    ),
}
_BATCH_P = ctypes.c_void_p
_POS4 = llama_cpp.llama_pos * 4
_PUBLIC: dict[str, tuple[list[Any], Any]] = {
    "llama_process": ([_ctx_p, ctypes.c_int, _BATCH_P], ctypes.c_int32),
    "llama_batch_ext_init": ([_ctx_p], _BATCH_P),
    "llama_batch_ext_free": ([_BATCH_P], None),
    "llama_batch_ext_clear": ([_BATCH_P], None),
    "llama_batch_ext_add_token": ([_BATCH_P, ctypes.c_int32, ctypes.c_int32], ctypes.c_int32),
    "llama_batch_ext_add_embd": ([_BATCH_P, ctypes.c_int32, llama_cpp.llama_embd], ctypes.c_int32),
    "llama_batch_ext_set_embd_token": ([_BATCH_P, ctypes.c_int32, llama_cpp.llama_embd], ctypes.c_bool),
    "llama_batch_ext_set_pos": ([_BATCH_P, ctypes.c_int32, ctypes.POINTER(llama_cpp.llama_pos)], ctypes.c_bool),
    "llama_batch_ext_set_output_logits": ([_BATCH_P, ctypes.c_int32, ctypes.c_bool], ctypes.c_bool),
    "llama_set_causal_attn": ([_ctx_p, ctypes.c_bool], None),
    "llama_vocab_mask": ([ctypes.c_void_p], ctypes.c_int32),
}
_PROCESS_ENCODE = 0  # LLAMA_PROCESS_TYPE_ENCODE
_PROCESS_DECODE = 1  # LLAMA_PROCESS_TYPE_DECODE


class HeadApi:
    """The llama.cpp calls the heads need, bound on ``lib`` (the loaded libllama by default).

    Construction raises a one-line SpecchatError naming the first missing symbol.
    """

    def __init__(self, lib: Any = None) -> None:
        lib = llama_cpp.llama_cpp._lib if lib is None else lib
        for name, (exported, argtypes, restype) in _EXT.items():
            setattr(self, name, _bind(lib, name, exported, argtypes, restype))
        for name, (argtypes, restype) in _PUBLIC.items():
            setattr(self, name, _bind(lib, name, (name,), argtypes, restype))

    def __getattr__(self, name: str) -> Callable[..., Any]:  # for type checkers: every bound call
        raise AttributeError(name)


def _bind(lib: Any, name: str, exported: Sequence[str], argtypes: list[Any], restype: Any) -> Callable[..., Any]:
    for symbol in exported:
        try:
            func = getattr(lib, symbol)
        except AttributeError:
            continue
        func.argtypes = argtypes
        func.restype = restype
        return cast(Callable[..., Any], func)
    raise SpecchatError(
        f"this llama.cpp build (llama-cpp-python {llama_cpp.__version__}) lacks {name}, which "
        "EAGLE-3 and DFlash heads need; a newer llama-cpp-python has it"
    )


_api: HeadApi | None = None


def head_api() -> HeadApi:
    """The bound calls on the loaded library (bound once)."""
    global _api
    if _api is None:
        _api = HeadApi()
    return _api


class HeadKind(str, enum.Enum):
    """The head formats this binding has code for (:data:`specchat.core.head_formats.HEAD_FORMATS` says how
    each is recognised, named and driven)."""

    EAGLE3 = "eagle3"
    DFLASH = "dflash"
    DFLASH2 = "dflash2"  # DFlash with a selector lattice (selector_top_k > 0)
    DSPARK = "dspark"  # DFlash with a Markov head (``markov_w1``) and perhaps a confidence head


@dataclass(frozen=True)
class HeadInfo:
    """What a head file says about itself (its metadata, read by llama.cpp)."""

    kind: HeadKind
    target_layers: tuple[int, ...]  # the target layers whose inputs it reads
    n_embd: int  # the head's own width
    target_hidden: int  # the target width it expects
    block_size: int = 0  # DFlash family: the trained block (anchor + masks)
    sample_from_anchor: bool = True  # DSpark: slot 0 of the block is a prediction too
    causal: bool = False  # DFlash family: causal attention inside the block
    selector_top_k: int = 0  # DFlash2: candidates per position
    confidence_head: bool = False  # DSpark: a per-position acceptance estimate
    mask_token: int = -1  # DFlash family: the noise token

    @property
    def format(self) -> HeadFormat:
        """Its entry in the table of head formats."""
        found = head_format(self.kind.value)
        assert found is not None, self.kind
        return found

    @property
    def max_draft(self) -> int:
        """The most tokens one round can draft: DFlash's block minus its anchor (DSpark from the anchor: the block)."""
        if not self.format.block:
            return 0  # no limit of its own: one decode per draft
        if self.format.anchor_draft and self.sample_from_anchor:
            return self.block_size
        return max(0, self.block_size - 1)

    def describe(self) -> str:
        block = f", block {self.block_size}" if self.format.block else ""
        layers = ", ".join(map(str, self.target_layers))
        return f"{self.format.label} (target layers {layers}{block})"


def is_head(model: Model) -> bool:
    """Whether ``model`` is a drafter head (a head format's architecture) rather than a model of its own."""
    return model.arch in head_archs()


def head_info(model: Model, api: HeadApi | None = None) -> HeadInfo:
    """The head's kind and metadata; a one-line SpecchatError for a file that is no head."""
    if not is_head(model):
        raise SpecchatError(f"{model.name} is not a drafter head (architecture '{model.arch}')")
    api = api or head_api()
    n = int(api.llama_model_target_layer_ids_n(model.ptr))
    ids = api.llama_model_target_layer_ids(model.ptr)
    layers = tuple(int(ids[i]) for i in range(n)) if ids else ()
    n_embd = int(llama_cpp.llama_model_n_embd(model.ptr))
    first = read_format(HeadHeader(model.arch, model.path.name))  # what the architecture alone says
    if first is not None and first.context == CHAINED:
        if first.target_layers and n != first.target_layers:
            raise SpecchatError(
                f"{model.name} is not an {first.label} (expected {first.target_layers} target layers, got {n})"
            )
        hidden = model.meta(f"{model.arch}.target_hidden_size")
        return HeadInfo(
            _binding_kind(model, first), layers, n_embd, int(hidden) if hidden and hidden.isdigit() else n_embd
        )
    if n == 0:
        raise SpecchatError(f"{model.name}: a DFlash head without target layers")
    block = model.meta("dflash.block_size")
    top_k = int(api.llama_model_dflash_selector_top_k(model.ptr))
    markov = model.meta("dflash.has_confidence_head")  # written by DSpark exports only
    tensors = frozenset(name for name in marking_tensors(model.arch) if _has_tensor(model, name))
    kind = _binding_kind(model, read_format(HeadHeader(model.arch, model.path.name, tensors, top_k)))
    return HeadInfo(
        kind,
        layers,
        n_embd,
        n_embd,
        block_size=int(block) if block and block.isdigit() else 16,
        sample_from_anchor=model.meta("dflash.sample_from_anchor") != "false",
        causal=model.meta("dflash.attention.causal") == "true",
        selector_top_k=top_k,
        confidence_head=kind is HeadKind.DSPARK and markov != "false",
        mask_token=int(api.llama_vocab_mask(llama_cpp.llama_model_get_vocab(model.ptr))),
    )


def _binding_kind(model: Model, found: HeadFormat | None) -> HeadKind:
    """The format the header says, as one this binding has code for; one line for a format it has none for."""
    if found is None or found.kind not in HeadKind._value2member_map_:
        what = found.label if found is not None else f"'{model.arch}' head"
        raise SpecchatError(f"{model.name}: this build cannot load a {what}")
    return HeadKind(found.kind)


def _has_tensor(model: Model, name: str) -> bool:
    """Whether the GGUF holds tensor ``name`` (read from the file's header with the gguf package)."""
    import gguf

    reader = gguf.GGUFReader(model.path)
    return any(t.name == name for t in reader.tensors)


def check_fits(target: Model, head: Model, info: HeadInfo) -> None:
    """One line on why ``head`` cannot draft for ``target``, from what only llama.cpp reads: its mask token
    and block. The rule on layers, widths, vocabularies and architectures, from the two files' headers, is
    applied before a head is opened, by whoever opens it (the runtime, the draft finder).
    """
    if info.format.block and not 0 <= info.mask_token < target.n_vocab:
        raise SpecchatError(f"{head.name}: a DFlash head without a mask token in the target's vocabulary")
    if info.format.block and info.block_size < 2:
        raise SpecchatError(f"{head.name}: a DFlash block of {info.block_size} cannot draft")


class HeadContext:
    """A head's llama.cpp context, tied to the target and following its every decode and cut.

    Subclasses say what the head does with each decoded chunk's features
    and how it drafts.
    """

    def __init__(
        self, target: Context, head: Model, info: HeadInfo, *, n_threads: int | None = None, api: HeadApi | None = None
    ) -> None:
        if target.observer is not None:
            raise SpecchatError(f"{target.model.name} already feeds its MTP heads; load it without a head")
        self.api = api = api or head_api()
        check_fits(target.model, head, info)
        self.info = info
        self.head = head
        self.target = target
        params = companion_params(target, n_threads)
        self._ptr = llama_cpp.llama_init_from_model(head.ptr, params)
        if not self._ptr:
            raise SpecchatError(f"llama.cpp could not create a context for {head.name}")
        self._memory = llama_cpp.llama_get_memory(self._ptr)
        self._batch = api.llama_batch_ext_init(self._ptr)
        self.n_batch = target.n_batch
        self.n_vocab = target.model.n_vocab
        self.n_embd = info.n_embd
        self.n_embd_tgt = int(llama_cpp.llama_model_n_embd(target.model.ptr))
        self.n_embd_enc = len(info.target_layers) * self.n_embd_tgt
        self._pos = _POS4()
        for lid in sorted(set(info.target_layers)):
            api.llama_set_embeddings_layer_inp(target._ptr, lid, True)
        self.n_held = 0  # positions the head's cache holds, in step with the target
        if target.tokens:
            target.truncate(0)  # the head must see every position the target holds
        target.observer = self

    @property
    def head_kind(self) -> str:
        """``eagle3``, ``dflash``, ``dflash2`` or ``dspark``: which drafter drives this head."""
        return self.info.kind.value

    @property
    def max_draft(self) -> int:
        """The most drafts one round can take from this head (0: no limit of its own)."""
        return self.info.max_draft

    def describe(self) -> str:
        return f"{self.info.describe()} for {self.target.model.name}"

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            if self.target.observer is self:
                self.target.observer = None
            if self.target._ptr:
                for lid in sorted(set(self.info.target_layers)):
                    self.api.llama_set_embeddings_layer_inp(self.target._ptr, lid, False)
            self.api.llama_batch_ext_free(self._batch)
            llama_cpp.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        self.close()

    # --- following the target ---------------------------------------------
    def decoded(self, start: int, tokens: Sequence[int]) -> None:
        raise NotImplementedError

    def rewound(self, n_keep: int) -> None:
        raise NotImplementedError

    def features(self, m: int) -> np.ndarray:
        """The target's inputs of the head's layers for the ``m`` rows just decoded: ``(m, layers * n_embd)``."""
        out = np.empty((m, self.n_embd_enc), dtype=np.float32)
        w = self.n_embd_tgt
        for k, lid in enumerate(self.info.target_layers):
            ptr = self.api.llama_get_embeddings_layer_inp(self.target._ptr, lid)
            if not ptr:
                raise SpecchatError(f"{self.target.model.name}: llama.cpp gave no input of layer {lid} for the head")
            out[:, k * w : (k + 1) * w] = np.ctypeslib.as_array(ptr, shape=(m, w))
        return out

    # --- batches ----------------------------------------------------------
    def _cut(self, n_keep: int) -> None:
        if self.n_held > n_keep:
            if not llama_cpp.llama_memory_seq_rm(self._memory, 0, max(n_keep, 0), -1):  # attention only
                llama_cpp.llama_memory_seq_rm(self._memory, 0, -1, -1)
                n_keep = 0
            self.n_held = max(n_keep, 0)

    def _clear(self) -> None:
        self.api.llama_batch_ext_clear(self._batch)

    def _add_token(self, token: int, pos: int, *, embd: np.ndarray | None = None, output: bool = False) -> int:
        api = self.api
        idx = int(api.llama_batch_ext_add_token(self._batch, 0, int(token)))
        if idx < 0:
            raise SpecchatError(f"{self.head.name}: the head's batch refused token {token} (code {idx})")
        self._set_pos(idx, pos)
        if embd is not None:
            api.llama_batch_ext_set_embd_token(self._batch, idx, _embd(embd))
        if output:
            api.llama_batch_ext_set_output_logits(self._batch, idx, True)
        return idx

    def _add_embd(self, row: np.ndarray, pos: int) -> int:
        idx = int(self.api.llama_batch_ext_add_embd(self._batch, 0, _embd(row)))
        if idx < 0:
            raise SpecchatError(f"{self.head.name}: the head's batch refused a feature row (code {idx})")
        self._set_pos(idx, pos)
        return idx

    def _set_pos(self, idx: int, pos: int) -> None:
        p = self._pos
        p[0] = p[1] = p[2] = pos
        p[3] = 0
        self.api.llama_batch_ext_set_pos(self._batch, idx, p)

    def _process(self, kind: int, what: str) -> None:
        follow_threads(self.target, self._ptr)
        rc = int(self.api.llama_process(self._ptr, kind, self._batch))
        if rc != 0:
            why = _DECODE_CODES.get(rc, f"code {rc}")
            raise SpecchatError(f"{self.head.name}: llama.cpp could not run the head's {what} ({why})")

    def _logits(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ptr, i), shape=(self.n_vocab,))


def _embd(row: np.ndarray) -> llama_cpp.llama_embd:
    """A view of a C-contiguous float32 row (or rows) for llama.cpp; ``row`` must outlive the call."""
    data = row.ctypes.data_as(_f32_p)
    n_rows = 1 if row.ndim == 1 else row.shape[0]
    return llama_cpp.llama_embd(data, n_rows, row.shape[-1])


class Eagle3Context(HeadContext):
    """An EAGLE-3 head following the target (``draft-eagle3`` in llama.cpp's common/speculative.cpp).

    For each position p the target decodes, the encoder fuses the inputs of
    the three target layers into ``g[p]``; the head's cache holds the pair
    (token p + 1, g[p]) at position p, so the last decoded position waits for
    the next committed token. Drafting writes (last committed token, g of the
    position before it) and reads the logits of the token after; each further
    draft is fed with the head's own pre-norm hidden state.
    """

    _HISTORY = 512  # g rows kept by position, for cuts back into earlier batches

    def __init__(
        self, target: Context, head: Model, info: HeadInfo, *, n_threads: int | None = None, api: HeadApi | None = None
    ) -> None:
        self._g: OrderedDict[int, np.ndarray] = OrderedDict()
        super().__init__(target, head, info, n_threads=n_threads, api=api)
        # the encoder's output and the decoder's pre-norm state both come back as "nextn" rows
        self.api.llama_set_embeddings_nextn(self._ptr, True, True)
        self._draft_at = 0
        self._prenorm = np.zeros(self.n_embd, dtype=np.float32)

    def decoded(self, start: int, tokens: Sequence[int]) -> None:
        m = len(tokens)
        feats = self.features(m)
        g = self._encode(feats)
        self._cut(start - 1)
        pairs: list[tuple[int, int, np.ndarray]] = []  # (token, pos, g row)
        if start > 0 and self.n_held == start - 1 and start - 1 in self._g:
            pairs.append((tokens[0], start - 1, self._g[start - 1]))
        if self.n_held + len(pairs) == start:
            pairs.extend((tokens[i + 1], start + i, g[i]) for i in range(m - 1))
        for i in range(m):
            self._g[start + i] = g[i]
        while len(self._g) > self._HISTORY:
            self._g.popitem(last=False)
        for at in range(0, len(pairs), self.n_batch):
            chunk = pairs[at : at + self.n_batch]
            self._clear()
            for token, pos, row in chunk:
                self._add_token(token, pos, embd=row)
            self._process(_PROCESS_DECODE, "decoder")
            self.n_held = chunk[-1][1] + 1

    def _encode(self, feats: np.ndarray) -> np.ndarray:
        """The encoder's g rows for ``feats`` (a copy: the buffer is the head's next output)."""
        m = len(feats)
        out = np.empty((m, self.n_embd), dtype=np.float32)
        for at in range(0, m, self.n_batch):
            rows = np.ascontiguousarray(feats[at : at + self.n_batch])
            self._clear()
            # the per-token encoder reads no positions, but the batch must continue the memory's
            base = int(llama_cpp.llama_memory_seq_pos_max(self._memory, 0)) + 1
            for j in range(len(rows)):
                self._add_embd(rows[j], base + j)
            self._process(_PROCESS_ENCODE, "encoder")
            ptr = self.api.llama_get_embeddings_nextn(self._ptr)
            if not ptr:
                raise SpecchatError(f"{self.head.name}: the EAGLE-3 encoder gave no output")
            out[at : at + len(rows)] = np.ctypeslib.as_array(ptr, shape=(len(rows), self.n_embd))
        return out

    def rewound(self, n_keep: int) -> None:
        self._cut(n_keep - 1)
        for pos in [p for p in self._g if p >= n_keep]:
            del self._g[pos]

    # --- drafting ---------------------------------------------------------
    def begin(self, token: int, pos: int) -> np.ndarray | None:
        """Logits of the head's guess after ``token`` at ``pos`` (the target holds ``pos`` positions).

        None when g at ``pos - 1`` is not known (the head then sits the round out).
        """
        if pos < 1 or pos != self.target.n_past or self.n_held < pos - 1 or pos - 1 not in self._g:
            return None
        self._cut(pos - 1)
        return self._step(token, pos - 1, self._g[pos - 1])

    def step(self, token: int) -> np.ndarray:
        """Logits after one more drafted ``token``, fed with the head's own pre-norm hidden state."""
        return self._step(token, self._draft_at, self._prenorm)

    def end(self, pos: int) -> None:
        """Forget the drafted positions: the head's cache holds the pairs of committed positions again."""
        self._cut(pos - 1)

    def _step(self, token: int, pos: int, g: np.ndarray) -> np.ndarray:
        row = np.ascontiguousarray(g, dtype=np.float32)
        self._clear()
        self._add_token(token, pos, embd=row, output=True)
        self._process(_PROCESS_DECODE, "decoder")
        self.n_held = pos + 1
        self._draft_at = pos + 1
        ptr = self.api.llama_get_embeddings_nextn_ith(self._ptr, 0)
        if not ptr:
            raise SpecchatError(f"{self.head.name}: the EAGLE-3 decoder gave no hidden state")
        self._prenorm = np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy()
        return self._logits(0)


@dataclass
class Block:
    """One DFlash block's output: logits per drafted slot, and what the variant adds."""

    logits: np.ndarray  # (slots, n_vocab): slot i is the distribution of draft i
    confidence: np.ndarray | None = None  # DSpark: the confidence head's estimate per slot
    candidates: np.ndarray | None = None  # DFlash2: (slots, top_k) token ids
    scores: np.ndarray | None = None  # DFlash2: (slots, top_k predecessors, top_k) transition scores


class DFlashContext(HeadContext):
    """A DFlash-family head following the target (``draft-dflash``/``draft-dspark`` in common/speculative.cpp).

    The features of every position the target decodes are injected into the
    head's KV cache at that position; a draft decodes one noise block
    ``[last, mask, ...]`` after them, non-causally, and the block's positions
    are forgotten again.
    """

    def __init__(
        self, target: Context, head: Model, info: HeadInfo, *, n_threads: int | None = None, api: HeadApi | None = None
    ) -> None:
        super().__init__(target, head, info, n_threads=n_threads, api=api)
        self.api.llama_set_embeddings_nextn(self._ptr, True, info.kind is not HeadKind.DFLASH2)
        self.api.llama_set_causal_attn(self._ptr, info.causal)

    def decoded(self, start: int, tokens: Sequence[int]) -> None:
        m = len(tokens)
        feats = self.features(m)
        self._cut(start)
        if self.n_held != start:
            return  # a gap the head cannot fill: it sits out until the target cuts back below it
        for at in range(0, m, self.n_batch):
            rows = np.ascontiguousarray(feats[at : at + self.n_batch])
            self._clear()
            for j in range(len(rows)):
                self._add_embd(rows[j], start + at + j)
            self._process(_PROCESS_DECODE, "feature injection")
            self.n_held = start + at + len(rows)

    def rewound(self, n_keep: int) -> None:
        self._cut(n_keep)

    def block(self, token: int, pos: int, n_draft: int) -> Block | None:
        """Decode the block for up to ``n_draft`` drafts after ``token`` at ``pos``; None if the head is behind."""
        info = self.info
        n_draft = min(n_draft, info.max_draft)
        if n_draft <= 0 or pos != self.target.n_past or self.n_held != pos:
            return None
        anchor_slot = info.kind is HeadKind.DSPARK and info.sample_from_anchor
        n_tokens = n_draft if anchor_slot else n_draft + 1
        first = 0 if anchor_slot else 1  # the block row of draft 0
        outputs = info.kind is not HeadKind.DFLASH2
        self._clear()
        for i in range(n_tokens):
            self._add_token(token if i == 0 else info.mask_token, pos + i, output=outputs)
        try:
            self.n_held = pos + n_tokens  # so that the cut below forgets the block, whatever happens
            self._process(_PROCESS_DECODE, "block")
            if info.kind is HeadKind.DFLASH2:
                return self._lattice(n_tokens)
            ptr = llama_cpp.llama_get_logits(self._ptr)
            logits = np.ctypeslib.as_array(ptr, shape=(n_tokens, self.n_vocab))[first:].copy()
            confidence = None
            if info.kind is HeadKind.DSPARK and info.confidence_head:
                nextn = self.api.llama_get_embeddings_nextn(self._ptr)
                if nextn:
                    rows = np.ctypeslib.as_array(nextn, shape=(n_tokens, self.n_embd))
                    confidence = rows[first:, 0].copy()
            return Block(logits, confidence)
        finally:
            self._cut(pos)

    def _lattice(self, n_tokens: int) -> Block:
        k = self.info.selector_top_k
        ptr = self.api.llama_get_embeddings_nextn(self._ptr)
        if not ptr:
            raise SpecchatError(f"{self.head.name}: the DFlash2 selector gave no lattice")
        rows = np.ctypeslib.as_array(ptr, shape=(n_tokens, self.n_embd))[1:]
        candidates = rows[:, :k].astype(np.int64)
        scores = rows[:, k : k + k * k].reshape(-1, k, k).copy()
        return Block(np.zeros((0, self.n_vocab), dtype=np.float32), None, candidates, scores)


def open_head(target: Context, head: Model, *, n_threads: int | None = None) -> Eagle3Context | DFlashContext:
    """The head's context on ``target``, of the kind its file says (its format's context); one line if it
    cannot draft for it."""
    info = head_info(head)
    contexts: dict[str, type[Eagle3Context] | type[DFlashContext]] = {CHAINED: Eagle3Context, BLOCK: DFlashContext}
    return contexts[info.format.context](target, head, info, n_threads=n_threads)


def open_draft(
    target: object, draft: Model | None, *, n_ctx: int, n_threads: int | None
) -> tuple[Context | None, Eagle3Context | DFlashContext | None]:
    """The draft's context: a :class:`Context` of its own for a draft model, a head's tied to ``target`` for a head.

    ``--draft`` takes either, told apart by the file's architecture as llama-server does.
    """
    if draft is None:
        return None, None
    if not is_head(draft):
        # It decodes in turn with the target: one thread count for both (see ThreadTuner).
        shared = target.tuner if isinstance(target, Context) else None
        return Context(draft, n_ctx=n_ctx, n_threads=n_threads, tuner=shared), None
    if not isinstance(target, Context):
        raise SpecchatError(f"{draft.name} is a drafter head: it needs the target on this machine, not on RPC servers")
    return None, open_head(target, draft, n_threads=n_threads)
