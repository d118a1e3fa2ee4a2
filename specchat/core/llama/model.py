"""Loading a GGUF model through llama.cpp's C API, and its vocabulary.

We call the low-level ``llama_cpp`` bindings directly rather than
``llama_cpp.Llama``: that class owns one context and one sampler, while the
speculative loop needs two contexts, batched logits and KV surgery.
"""

from __future__ import annotations

import ctypes
import enum
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from specchat.core.llama import devices
from specchat.core.llama.backend import ensure_backend, extra_buffers_safe, recent_errors
from specchat.core.paths import not_a_file
from specchat.core.types import SpecchatError

__all__ = ["GGUF_MAGIC", "Model", "ModelKind", "check_gguf_file", "ensure_backend", "vocab_mismatch"]

GGUF_MAGIC = b"GGUF"

_UNKNOWN_ARCH = re.compile(r"unknown model architecture: '([^']*)'")


class ModelKind(str, enum.Enum):
    """How a model remembers the past: a KV cache, recurrent state, or both."""

    DENSE = "dense"  # attention only: the KV cache can be cut at any position
    HYBRID = "hybrid"  # attention and recurrent layers (Qwen3.5, LFM2, Granite 4, Nemotron-H, Jamba)
    RECURRENT = "recurrent"  # recurrent layers only (Mamba, RWKV)


def check_gguf_file(path: str | os.PathLike[str]) -> Path:
    """Raise a one-line SpecchatError unless ``path`` is an existing GGUF file."""
    p = Path(path).expanduser()
    kind = not_a_file(p)
    if kind == "not found":
        raise SpecchatError(f"model file not found: {p}")
    if kind is not None:  # checked before opening: a FIFO would block it
        raise SpecchatError(f"model path is not a file but {kind}: {p}")
    try:
        with p.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise SpecchatError(f"cannot read model file {p}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise SpecchatError(f"not a GGUF file (bad magic {magic!r}): {p}")
    return p


_LONG_TEXT = 1 << 20  # characters: tokenizing this many takes about a second or more

ProgressCallback = Callable[[float], bool]
"""Called with load progress 0..1; return False to abort the load."""


class Model:
    """A loaded llama.cpp model: weights plus vocabulary helpers."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_gpu_layers: int = 0,
        progress: ProgressCallback | None = None,
        vocab_only: bool = False,
        no_alloc: bool = False,
        load_mtp: bool = False,
        devices: list[int] | None = None,
    ) -> None:
        ensure_backend()
        self.path = check_gguf_file(path)
        params = llama_cpp.llama_model_default_params()
        self.n_gpu_layers = n_gpu_layers
        params.n_gpu_layers = n_gpu_layers if n_gpu_layers >= 0 else 999
        params.vocab_only = vocab_only
        fields = {f[0] for f in llama_cpp.llama_model_params._fields_}
        self.mtp_loaded = load_mtp and "load_mtp" in fields
        self.extra_buffers = "use_extra_bufts" not in fields or extra_buffers_safe()
        if not self.extra_buffers:
            params.use_extra_bufts = False
        if self.mtp_loaded:
            params.load_mtp = True  # otherwise llama.cpp skips the MTP (NextN) layers' weights
        if no_alloc:
            params.no_alloc = True  # tensors described, none allocated or read: enough to size a context
            # llama.cpp maps nothing in this mode (and asserts so); older bindings call the switch use_mmap.
            if "load_mode" in fields:
                params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
                params.lazy_mode = llama_cpp.LLAMA_LAZY_MODE_OFF
            else:
                params.use_mmap = False
        if devices is not None:  # an explicit device list (ggml handles); empty: the CPU alone
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if progress is not None:

            @llama_cpp.llama_progress_callback
            def _cb(fraction: float, user_data: ctypes.c_void_p) -> bool:
                try:
                    return bool(progress(float(fraction)))
                except Exception:  # noqa: BLE001 - no exception may cross the C boundary: it aborts the load
                    return False

            self._progress_cb = _cb
            params.progress_callback = _cb
        recent_errors.clear()
        self._ptr = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._ptr:
            raise SpecchatError(self._load_failure(n_gpu_layers, vocab_only))
        self.kind = _model_kind(self._ptr)
        # From the metadata: a vocab-only load has no hyperparameters to ask llama.cpp for.
        nextn = self.meta(f"{self.arch}.nextn_predict_layers")
        self.n_layer_nextn: int = int(nextn) if nextn and nextn.isdigit() else 0
        self._vocab = llama_cpp.llama_model_get_vocab(self._ptr)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train: int = llama_cpp.llama_model_n_ctx_train(self._ptr)
        self.bos: int = llama_cpp.llama_vocab_bos(self._vocab)
        self.eos: int = llama_cpp.llama_vocab_eos(self._vocab)
        self.eot: int = llama_cpp.llama_vocab_eot(self._vocab)
        self.add_bos: bool = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.vocab_type: int = llama_cpp.llama_vocab_type(self._vocab)
        self._pieces: list[bytes | None] = [None] * self.n_vocab
        self._piece_buf = ctypes.create_string_buffer(256)
        self._eog: frozenset[int] | None = None
        self._longest_piece: int | None = None

    def _load_failure(self, n_gpu_layers: int, vocab_only: bool) -> str:
        """The one-line reason for a failed load: an unknown architecture, the file, or perhaps GPU memory."""
        unknown = next((m for m in map(_UNKNOWN_ARCH.search, recent_errors) if m), None)
        if unknown is not None:
            return (
                f"this llama.cpp build (llama-cpp-python {llama_cpp.__version__}) does not know the model "
                f"architecture '{unknown.group(1)}' (a newer llama-cpp-python may): {self.path}"
            )
        if n_gpu_layers != 0 and not vocab_only and devices.offload_supported():
            layers = "all layers" if n_gpu_layers < 0 else f"{n_gpu_layers} layers"
            return (
                f"llama.cpp could not load the model with {layers} on the GPU (not enough GPU memory? "
                f"try GPU layers 'auto' or fewer; or the GGUF is truncated or corrupt): {self.path}"
            )
        return f"llama.cpp could not load the model (truncated or corrupt GGUF?): {self.path}"

    # --- lifetime -------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_ptr", None):
            llama_cpp.llama_model_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        self.close()

    @property
    def ptr(self) -> llama_cpp.llama_model_p:
        if not self._ptr:
            raise SpecchatError("model is closed")
        ptr: llama_cpp.llama_model_p = self._ptr
        return ptr

    # --- description ----------------------------------------------------
    @property
    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.ptr, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    @property
    def n_layers(self) -> int:
        return int(llama_cpp.llama_model_n_layer(self.ptr))

    @property
    def n_embd(self) -> int:
        """The width of its hidden states."""
        return int(llama_cpp.llama_model_n_embd(self.ptr))

    @property
    def arch(self) -> str:
        """The GGUF's ``general.architecture`` (e.g. ``qwen35``)."""
        return self.meta("general.architecture") or "?"

    @property
    def name(self) -> str:
        return self.path.name

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", "replace") if raw else None

    # --- vocabulary -----------------------------------------------------
    def fewest_tokens(self, n_bytes: int) -> int:
        """A count that ``n_bytes`` of UTF-8 text certainly tokenizes into no fewer than (0 when unknown).

        SentencePiece and byte-level BPE vocabularies lose no byte (a token stands for its own bytes,
        special tokens for their text), so no token covers more bytes than the longest one spells;
        the others (WordPiece, Unigram) may drop whitespace, so nothing is promised for them.
        """
        if self.vocab_type not in (llama_cpp.LLAMA_VOCAB_TYPE_SPM, llama_cpp.LLAMA_VOCAB_TYPE_BPE):
            return 0
        if self._longest_piece is None:
            buf = ctypes.create_string_buffer(256)
            longest = 1
            for token in range(self.n_vocab):
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
                longest = max(longest, n if n >= 0 else -n)
            self._longest_piece = longest
        return n_bytes // self._longest_piece

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """``text``'s tokens. A long text is tokenized on a helper thread, so that the caller's wait (and
        Ctrl-C in a terminal) is not stuck in llama.cpp for the seconds that takes."""
        if len(text) < _LONG_TEXT:
            return self._tokenize(text, add_special, parse_special)
        result: list[list[int]] = []
        failed: list[BaseException] = []

        def work() -> None:
            try:
                result.append(self._tokenize(text, add_special, parse_special))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                failed.append(exc)

        worker = threading.Thread(target=work, name="specchat-tokenize", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
        if failed:
            raise failed[0]
        return result[0]

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
            if n < 0:
                raise SpecchatError("tokenization failed")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (control tokens render as nothing)."""
        cached = self._pieces[token]
        if cached is not None:
            return cached
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, big, len(big), 0, False)
            data = big.raw[:n]
        else:
            data = self._piece_buf.raw[:n]
        self._pieces[token] = data
        return data

    def token_text(self, token: int) -> str:
        """The vocabulary's own spelling of a token (e.g. ``Ġthe``), for fingerprints and tooltips."""
        return str(llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", "replace"))

    def is_eog(self, token: int) -> bool:
        return token in self.eog_tokens

    @property
    def eog_tokens(self) -> frozenset[int]:
        """End-of-generation tokens (EOS, EOT, <|im_end|> and the like)."""
        if self._eog is None:
            is_eog = llama_cpp.llama_vocab_is_eog
            self._eog = frozenset(t for t in range(self.n_vocab) if is_eog(self._vocab, t))
        return self._eog


def _model_kind(ptr: llama_cpp.llama_model_p) -> ModelKind:
    # Bindings older than llama.cpp's hybrid models have neither call; their models are all dense.
    is_recurrent = getattr(llama_cpp, "llama_model_is_recurrent", None)
    is_hybrid = getattr(llama_cpp, "llama_model_is_hybrid", None)
    if is_recurrent is not None and is_recurrent(ptr):
        return ModelKind.RECURRENT
    if is_hybrid is not None and is_hybrid(ptr):
        return ModelKind.HYBRID
    return ModelKind.DENSE


def vocab_mismatch(target: Model, draft: Model) -> str | None:
    """Why ``draft``'s tokens cannot stand for ``target``'s, or None when they can.

    A draft whose vocabulary extends the target's (or vice versa) by a padded
    tail is accepted: tokens past the shared range are never accepted.
    """
    if target.vocab_type != draft.vocab_type:
        return f"tokenizer types differ (target type {target.vocab_type}, draft type {draft.vocab_type})"
    shared = min(target.n_vocab, draft.n_vocab)
    if abs(target.n_vocab - draft.n_vocab) > max(128, shared // 100):
        return f"vocabulary sizes differ: target {target.n_vocab} tokens, draft {draft.n_vocab}"
    for t in range(shared):
        a, b = target.token_text(t), draft.token_text(t)
        if a != b:
            return f"token {t} differs: target {a!r}, draft {b!r}"
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        return (
            f"BOS handling differs (target bos={target.bos} add={target.add_bos}, "
            f"draft bos={draft.bos} add={draft.add_bos})"
        )
    return None
