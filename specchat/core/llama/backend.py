"""Starting llama.cpp once per process: its log, its backend plugins, and ggml's device functions.

Everything else in this package calls :func:`ensure_backend` before touching
llama.cpp; :mod:`specchat.core.llama.devices` lists devices through the
handle :func:`ggml_lib` binds. Nothing here imports the package's other
modules, so they can all import it.

ggml's backend-device API (``ggml_backend_dev_*``) is not wrapped by the
``llama_cpp`` bindings; the few functions needed are bound with ctypes,
looked up through the ``libllama`` that ``llama_cpp`` loaded. Any failure
there (an older build, a missing symbol) leaves the handle unbound rather
than raising: device listing is informative, never essential.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections import deque
from pathlib import Path

import llama_cpp

_GGML_LOG_LEVEL_ERROR = 4

_bind_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_bind_failed = False
_dynamic_loaded = False

_backend_lock = threading.Lock()
_backend_ready = False
_LOG_CALLBACK = None  # keep the ctypes callback alive for the process lifetime

recent_errors: deque[str] = deque(maxlen=16)
"""llama.cpp's latest error lines: a failed load only returns NULL, the reason is in its log."""


def llama_lib_dir() -> Path:
    """The folder holding the ``llama_cpp`` package's shared libraries."""
    return Path(llama_cpp.__file__).resolve().parent / "lib"


def ggml_lib() -> ctypes.CDLL | None:
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
    no backend, so this must run before the first model. It is a no-op when
    backends are already registered (the usual, statically linked build) and
    safe to call more than once.
    """
    global _dynamic_loaded
    lib = ggml_lib()
    if lib is None:
        return 0
    with _bind_lock:
        if not _dynamic_loaded and lib.ggml_backend_reg_count() == 0:
            if hasattr(lib, "ggml_backend_load_all_from_path"):
                folder = Path(lib_dir) if lib_dir is not None else llama_lib_dir()
                lib.ggml_backend_load_all_from_path(str(folder).encode())
            _dynamic_loaded = True
        return int(lib.ggml_backend_reg_count())


def ensure_backend() -> None:
    """Initialise llama.cpp once; its log goes nowhere (or to stderr with SPECCHAT_LLAMA_LOG), errors are kept."""
    global _backend_ready, _LOG_CALLBACK
    with _backend_lock:
        if _backend_ready:
            return
        # Installed first: loading the backend plugins already logs ("load_backend: loaded CPU backend ...").
        echo = bool(os.environ.get("SPECCHAT_LLAMA_LOG"))

        @llama_cpp.llama_log_callback
        def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            line = text.decode("utf-8", "replace") if text else ""
            if level == _GGML_LOG_LEVEL_ERROR:
                recent_errors.append(line)
            if echo:
                sys.stderr.write(line)

        _LOG_CALLBACK = _log
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
        load_dynamic_backends()  # a portable (GGML_BACKEND_DL) build registers nothing by itself
        llama_cpp.llama_backend_init()
        _backend_ready = True


def extra_buffers_safe(system_info: str | None = None) -> bool:
    """Whether models may load their weights into llama.cpp's extra CPU buffer types (weight repacking, AMX).

    Not where the CPU backend uses AMX (``AMX_INT8 = 1`` in llama.cpp's system info, ``system_info``: its
    text, read from llama.cpp where None): llama.cpp's AMX matrix multiply crashes the process on some such
    machines at the first decode of a quantized model (ggml-org/llama.cpp#20824, open), and a crash loses the
    reply without a word. ``SPECCHAT_CPU_EXTRA_BUFFERS=1`` keeps them there too.
    """
    if os.environ.get("SPECCHAT_CPU_EXTRA_BUFFERS") == "1":
        return True
    if system_info is None:
        ensure_backend()
        raw = llama_cpp.llama_print_system_info()
        system_info = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return "AMX_INT8 = 1" not in system_info
