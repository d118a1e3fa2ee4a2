"""Compute devices llama.cpp can see, and how many layers to put on a GPU.

Detection goes through ggml's backend-device API (``ggml_backend_dev_*``),
which the ``llama_cpp`` bindings do not wrap; we bind the few functions we
need with ctypes, looked up through the ``libllama`` that ``llama_cpp`` loaded. Any
failure there (an older build, a missing symbol) yields an empty device list
rather than an exception: device listing is informative, never essential.

The two pure functions, :func:`suggest_gpu_layers` and
:func:`describe_placement`, need no llama.cpp at all.
"""

from __future__ import annotations

import ctypes
import enum
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

MIB = 1 << 20
GIB = 1 << 30
DEFAULT_RESERVE_BYTES = 1 * GIB
"""Device memory kept free for KV caches, compute buffers and the driver's own context."""


class DeviceType(enum.Enum):
    """ggml's ``enum ggml_backend_dev_type``, plus UNKNOWN for values added later."""

    CPU = 0
    GPU = 1
    IGPU = 2  # integrated GPU sharing host memory
    ACCEL = 3  # helps the CPU backend (BLAS, AMX); holds no layers of its own
    META = 4  # wraps several devices for tensor parallelism
    UNKNOWN = -1

    @classmethod
    def from_code(cls, code: int) -> DeviceType:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN

    @property
    def holds_layers(self) -> bool:
        """Whether llama.cpp places offloaded layers on a device of this type."""
        return self in (DeviceType.GPU, DeviceType.IGPU)


@dataclass(frozen=True)
class BackendDevice:
    """One ggml backend device, as llama.cpp reports it."""

    name: str
    description: str
    type: DeviceType
    free_bytes: int
    total_bytes: int

    def summary(self) -> str:
        """One line such as ``CUDA0 (GPU, NVIDIA H200): 139.2/139.8 GiB free``."""
        desc = f", {self.description}" if self.description and self.description != self.name else ""
        mem = f": {self.free_bytes / GIB:.1f}/{self.total_bytes / GIB:.1f} GiB free" if self.total_bytes else ""
        return f"{self.name} ({self.type.name}{desc}){mem}"


# --- binding ggml's device API ------------------------------------------------

_bind_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_bind_failed = False
_dynamic_loaded = False


def llama_lib_dir() -> Path:
    """The folder holding the ``llama_cpp`` package's shared libraries."""
    return Path(llama_cpp.__file__).resolve().parent / "lib"


def _ggml_lib() -> ctypes.CDLL | None:
    """libllama's handle with the ggml device functions' signatures set, or None if unavailable."""
    global _lib, _bind_failed
    with _bind_lock:
        if _lib is not None or _bind_failed:
            return _lib
        try:
            # Look the symbols up through libllama's own handle: dlsym then searches
            # libllama and the very libggml it is linked to. Opening libggml by path
            # can map a second copy (wheels ship libggml.so and libggml.so.0 as two
            # files), with its own backend registry that libllama never sees.
            lib = getattr(llama_cpp.llama_cpp, "_lib", None)
            if lib is None:
                name = {"win32": "llama.dll", "darwin": "libllama.dylib"}.get(sys.platform, "libllama.so")
                lib = ctypes.CDLL(str(llama_lib_dir() / name))
            vp = ctypes.c_void_p
            sigs: dict[str, tuple[list[type], type | None]] = {
                "ggml_backend_reg_count": ([], ctypes.c_size_t),
                "ggml_backend_dev_count": ([], ctypes.c_size_t),
                "ggml_backend_dev_get": ([ctypes.c_size_t], vp),
                "ggml_backend_dev_name": ([vp], ctypes.c_char_p),
                "ggml_backend_dev_description": ([vp], ctypes.c_char_p),
                "ggml_backend_dev_memory": (
                    [vp, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
                    None,
                ),
                "ggml_backend_dev_type": ([vp], ctypes.c_int),
            }
            for fname, (argtypes, restype) in sigs.items():
                fn = getattr(lib, fname)
                fn.argtypes = argtypes
                fn.restype = restype
            # Optional: only builds with dynamically loaded backends need it.
            if hasattr(lib, "ggml_backend_load_all_from_path"):
                lib.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
                lib.ggml_backend_load_all_from_path.restype = None
            _lib = lib
        except (OSError, AttributeError):
            _bind_failed = True
        return _lib


def load_dynamic_backends(lib_dir: str | os.PathLike[str] | None = None) -> int:
    """Load ggml backends built as plugins (``GGML_BACKEND_DL=ON``); return the backend count.

    A portable build ships the CPU backend as several ``libggml-cpu-<variant>``
    modules and picks the best one for the running CPU at load time. Nothing is
    registered until someone asks, and llama.cpp refuses to load a model with
    no backend, so this must run before the first :class:`Model`. It is a
    no-op when backends are already registered (the usual, statically linked
    build) and safe to call more than once.
    """
    global _dynamic_loaded
    lib = _ggml_lib()
    if lib is None:
        return 0
    with _bind_lock:
        if not _dynamic_loaded and lib.ggml_backend_reg_count() == 0:
            if hasattr(lib, "ggml_backend_load_all_from_path"):
                folder = Path(lib_dir) if lib_dir is not None else llama_lib_dir()
                lib.ggml_backend_load_all_from_path(str(folder).encode())
            _dynamic_loaded = True
        return int(lib.ggml_backend_reg_count())


def offload_supported() -> bool:
    """Whether this llama.cpp build can offload layers to a GPU (CUDA, Metal, Vulkan, ...)."""
    from specchat.core.llama.model import ensure_backend

    load_dynamic_backends()
    ensure_backend()
    return bool(llama_cpp.llama_supports_gpu_offload())


def list_devices() -> list[BackendDevice]:
    """Every backend device llama.cpp sees, CPU included; empty if the API is unavailable."""
    from specchat.core.llama.model import ensure_backend

    load_dynamic_backends()
    ensure_backend()
    lib = _ggml_lib()
    if lib is None:
        return []
    devices: list[BackendDevice] = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        if not dev:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        devices.append(
            BackendDevice(
                name=(lib.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
                description=(lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
                type=DeviceType.from_code(int(lib.ggml_backend_dev_type(dev))),
                free_bytes=int(free.value),
                total_bytes=int(total.value),
            )
        )
    return devices


def offload_free_bytes(devices: list[BackendDevice]) -> int:
    """Free memory summed over the devices that can hold layers (llama.cpp splits layers across them)."""
    return sum(d.free_bytes for d in devices if d.type.holds_layers)


# --- pure placement policy ------------------------------------------------------


def _layers_that_fit(model_bytes: int, n_layers: int, budget: int) -> int:
    """Whole repeating layers of a model that fit in ``budget`` bytes.

    A layer's cost is estimated as ``model_bytes / (n_layers + 1)``: the
    ``+ 1`` stands for the non-repeating tensors (embeddings, output head),
    which makes the estimate err on the side of fewer layers.
    """
    if n_layers <= 0 or model_bytes <= 0 or budget <= 0:
        return 0
    per_layer = model_bytes / (n_layers + 1)
    return min(n_layers, int(budget // per_layer))


def suggest_gpu_layers(
    target_bytes: int,
    target_layers: int,
    draft_bytes: int,
    draft_layers: int,
    free_bytes: int,
    *,
    reserve_bytes: int = DEFAULT_RESERVE_BYTES,
) -> tuple[int, int]:
    """Suggest ``(n_gpu_layers, draft_gpu_layers)`` for a target/draft pair.

    Values use llama.cpp's convention as the CLI does: ``-1`` means the whole
    model (every layer and the output head), ``0`` means CPU only, and ``n``
    means the last ``n`` repeating layers.

    Policy:

    1. Keep ``reserve_bytes`` of ``free_bytes`` free for KV caches, compute
       buffers and the driver; the rest is the budget.
    2. The draft goes first. It runs ``k`` times per round for the target's
       once, and it is small, so putting all of it on the GPU buys the most
       speed per byte. A draft that fits whole gets ``-1``; otherwise it gets
       as many layers as fit (and the target gets none).
    3. The target takes what is left: ``-1`` if its whole file fits,
       otherwise as many layers as fit.

    Model sizes are the GGUF file sizes, a close stand-in for weight memory.
    ``draft_bytes == 0`` or ``draft_layers == 0`` means there is no draft
    model (n-gram drafting), and the target gets the whole budget.
    """
    for name, value in (
        ("target_bytes", target_bytes),
        ("target_layers", target_layers),
        ("draft_bytes", draft_bytes),
        ("draft_layers", draft_layers),
        ("free_bytes", free_bytes),
        ("reserve_bytes", reserve_bytes),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")

    budget = free_bytes - reserve_bytes
    has_draft = draft_bytes > 0 and draft_layers > 0

    draft_gpu = 0
    if has_draft and budget > 0:
        if draft_bytes <= budget:
            draft_gpu = -1
            budget -= draft_bytes
        else:
            draft_gpu = _layers_that_fit(draft_bytes, draft_layers, budget)
            budget = 0  # a draft that does not fit leaves nothing for the target

    target_gpu = 0
    if target_bytes > 0 and target_layers > 0 and budget > 0:
        target_gpu = -1 if target_bytes <= budget else _layers_that_fit(target_bytes, target_layers, budget)
    return target_gpu, draft_gpu


def describe_placement(n_gpu_layers: int, n_layers: int, offload_supported: bool) -> str:
    """Where a model's layers run, for the stats panel.

    ``"CPU"``, ``"GPU (all 30 layers)"`` or ``"GPU 12/30 layers + CPU"``.
    ``n_gpu_layers`` is the value passed to llama.cpp (``-1`` = all).
    """
    if not offload_supported or n_gpu_layers == 0 or n_layers <= 0:
        return "CPU"
    if n_gpu_layers < 0 or n_gpu_layers >= n_layers:
        return f"GPU (all {n_layers} layers)"
    return f"GPU {n_gpu_layers}/{n_layers} layers + CPU"
