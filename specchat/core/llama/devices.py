"""Compute devices llama.cpp can see, and how many layers to put on a GPU.

Detection goes through ggml's backend-device API (``ggml_backend_dev_*``),
which the ``llama_cpp`` bindings do not wrap; we bind the few functions we
need with ctypes, looked up through the ``libllama`` that ``llama_cpp`` loaded. Any
failure there (an older build, a missing symbol) yields an empty device list
rather than an exception: device listing is informative, never essential.

How many layers of which model go to the GPU is decided in
:mod:`specchat.core.models.placement`, from what this module reports.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path

import llama_cpp

from specchat.core.build import GIB, MIB, BackendDevice, BuildInfo, DeviceType

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

    ensure_backend()  # quiets llama.cpp's log, then loads dynamic backends
    return bool(llama_cpp.llama_supports_gpu_offload())


def list_devices() -> list[BackendDevice]:
    """Every backend device llama.cpp sees, CPU included; empty if the API is unavailable."""
    from specchat.core.llama.model import ensure_backend

    ensure_backend()  # quiets llama.cpp's log, then loads dynamic backends
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


def build_info() -> BuildInfo:
    """Describe the loaded llama.cpp build and the devices it sees."""
    offload = offload_supported()
    raw = llama_cpp.llama_print_system_info()
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return BuildInfo(
        llama_cpp_python=str(getattr(llama_cpp, "__version__", "unknown")),
        offload=offload,
        devices=tuple(list_devices()),
        system_info=text.strip().rstrip("|").strip(),
    )
