"""Compute devices llama.cpp can see, and whether this build offloads to a GPU.

Detection goes through ggml's backend-device API (``ggml_backend_dev_*``),
bound in :mod:`specchat.core.llama.backend`; where that binding failed (an
older build, a missing symbol) the device list is empty rather than an
exception: device listing is informative, never essential.

How many layers of which model go to the GPU is decided in
:mod:`specchat.core.models.placement`, from what this module reports.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from specchat.core.build import GIB, BackendDevice, BuildInfo, DeviceType
from specchat.core.llama.backend import ensure_backend, ggml_lib, llama_lib_dir, load_dynamic_backends

__all__ = [  # the build vocabulary and the backend's loader are re-exported: callers ask this module
    "GIB",
    "BackendDevice",
    "BuildInfo",
    "DeviceType",
    "build_info",
    "list_devices",
    "llama_lib_dir",
    "load_dynamic_backends",
    "offload_free_bytes",
    "offload_supported",
]


def offload_supported() -> bool:
    """Whether this llama.cpp build can offload layers to a GPU (CUDA, Metal, Vulkan, ...)."""
    ensure_backend()  # quiets llama.cpp's log, then loads dynamic backends
    if not llama_cpp.llama_supports_gpu_offload():
        return False
    rpc = getattr(llama_cpp, "llama_supports_rpc", None)
    if rpc is None or not rpc():
        return True
    # An RPC build says yes on any machine (its devices are remote): ask for a local GPU instead.
    return any(d.type.holds_layers and not d.name.startswith("RPC") for d in list_devices())


def list_devices() -> list[BackendDevice]:
    """Every backend device llama.cpp sees, CPU included; empty if the API is unavailable."""
    ensure_backend()  # quiets llama.cpp's log, then loads dynamic backends
    lib = ggml_lib()
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
