"""llama.cpp's RPC backend (``ggml-rpc``) through ctypes: serving this machine's devices, adding remote ones.

The ``llama_cpp`` bindings do not wrap it (and ``Llama(rpc_servers=...)``
does nothing in 0.3.x), so the two entry points are looked up the way
llama.cpp's own tools do: ``ggml_backend_reg_get_proc_address`` on the
backend registered as "RPC". It exists only in builds made with
``-DGGML_RPC=on``.

ggml aborts the process when a server cannot be reached or goes away, so
:func:`add_servers` belongs in a process that may die (the target's worker,
a probe); it checks that each server accepts a connection first, which turns
the common case (nothing listening) into an error instead of an abort.
"""

from __future__ import annotations

import ctypes
import socket
import threading

import llama_cpp

from specchat.core.llama.backend import ensure_backend, ggml_lib
from specchat.core.remote import RemoteDevice, RemoteError
from specchat.core.types import SpecchatError

_vp = ctypes.c_void_p
_ADD_SERVER = ctypes.CFUNCTYPE(_vp, ctypes.c_char_p)
_START_SERVER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(_vp)
)
_lock = threading.Lock()
_bound: ctypes.CDLL | None = None
_registered: dict[str, list[int]] = {}  # server -> its device handles, registered once per process


def _lib() -> ctypes.CDLL | None:
    """ggml's registry functions on libllama's handle (None without the device API)."""
    global _bound
    with _lock:
        if _bound is not None:
            return _bound
        lib = ggml_lib()
        if lib is None:
            return None
        sigs: dict[str, tuple[list[type], type | None]] = {
            "ggml_backend_reg_by_name": ([ctypes.c_char_p], _vp),
            "ggml_backend_reg_get_proc_address": ([_vp, ctypes.c_char_p], _vp),
            "ggml_backend_register": ([_vp], None),
            "ggml_backend_reg_dev_count": ([_vp], ctypes.c_size_t),
            "ggml_backend_reg_dev_get": ([_vp, ctypes.c_size_t], _vp),
            "ggml_backend_dev_by_name": ([ctypes.c_char_p], _vp),
        }
        try:
            for name, (argtypes, restype) in sigs.items():
                fn = getattr(lib, name)
                fn.argtypes = argtypes
                fn.restype = restype
        except AttributeError:
            return None
        _bound = lib
        return lib


def _rpc_reg() -> int | None:
    ensure_backend()
    lib = _lib()
    if lib is None:
        return None
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    return int(reg) if reg else None


def has_rpc() -> bool:
    """Whether this llama.cpp build has the RPC backend (``-DGGML_RPC=on``)."""
    supports = getattr(llama_cpp, "llama_supports_rpc", None)
    return _rpc_reg() is not None and (supports is None or bool(supports()))


def _proc(name: str) -> int:
    reg = _rpc_reg()
    lib = _lib()
    if reg is None or lib is None:
        from specchat.core.remote import RPC_BUILD_HINT

        raise SpecchatError(f"this llama.cpp build has no RPC backend; {RPC_BUILD_HINT}")
    address = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not address:
        raise SpecchatError(f"this llama.cpp build's RPC backend has no {name}")
    return int(address)


def check_reachable(server: str, timeout: float = 5.0) -> None:
    """Raise RemoteError unless something accepts a TCP connection at ``server`` (HOST:PORT)."""
    host, _, port = server.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise RemoteError(f"cannot reach the remote server at {server}: {why}") from None


def add_servers(servers: tuple[str, ...], *, timeout: float = 5.0) -> list[tuple[str, int]]:
    """Register each server's devices with ggml; return ``(server, device handle)`` pairs, in order.

    Aborts the process if a server vanishes between the reachability check
    and the handshake: call it only where that is survivable.
    """
    add = _ADD_SERVER(_proc("ggml_backend_rpc_add_server"))
    lib = _lib()
    assert lib is not None
    found: list[tuple[str, int]] = []
    for server in servers:
        if server not in _registered:
            check_reachable(server, timeout)
            reg = add(server.encode())
            if not reg:
                raise RemoteError(f"the remote server at {server} exposes no devices")
            lib.ggml_backend_register(reg)
            count = int(lib.ggml_backend_reg_dev_count(reg))
            _registered[server] = [int(d) for d in (lib.ggml_backend_reg_dev_get(reg, i) for i in range(count)) if d]
        found.extend((server, dev) for dev in _registered[server])
    return found


def describe(server: str, dev: int) -> RemoteDevice:
    """A registered remote device's name and memory (the remote machine's)."""
    lib = ggml_lib()
    assert lib is not None
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    name = (lib.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace")
    return RemoteDevice(server, name, int(free.value), int(total.value))


def local_devices(names: list[str] | None = None) -> list[int]:
    """Handles of this machine's devices that hold layers (GPUs), or of the devices named."""
    ensure_backend()
    lib = ggml_lib()
    bound = _lib()
    if lib is None or bound is None:
        return []
    if names:
        handles = []
        for name in names:
            dev = bound.ggml_backend_dev_by_name(name.encode())
            if not dev:
                raise SpecchatError(f"no device named {name} in this llama.cpp build (see 'specchat info')")
            handles.append(int(dev))
        return handles
    out = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        name = (lib.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace")
        if dev and int(lib.ggml_backend_dev_type(dev)) in (1, 2) and not name.startswith("RPC"):
            out.append(int(dev))
    return out


def cpu_device() -> int:
    """The CPU device's handle."""
    ensure_backend()
    lib = ggml_lib()
    assert lib is not None
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        if dev and int(lib.ggml_backend_dev_type(dev)) == 0:
            return int(dev)
    raise SpecchatError("this llama.cpp build reports no CPU device")


def start_server(endpoint: str, devices: list[int], threads: int, cache_dir: str | None = None) -> None:
    """Serve ``devices`` at ``endpoint`` (HOST:PORT); blocks for the life of the server."""
    start = _START_SERVER(_proc("ggml_backend_rpc_start_server"))
    array = (_vp * len(devices))(*devices)
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads, len(devices), array)
