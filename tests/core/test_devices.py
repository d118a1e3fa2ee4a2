"""Device detection on the llama.cpp build the tests run against."""

from __future__ import annotations

import pytest

from specchat.core.llama import devices
from specchat.core.llama.devices import (
    GIB,
    BackendDevice,
    DeviceType,
    offload_free_bytes,
)

# --- detection on the build the tests run against ------------------------------------


def _dev(kind: DeviceType, free: int, total: int | None = None, name: str = "X") -> BackendDevice:
    return BackendDevice(name, "desc", kind, free, total if total is not None else free)


def test_offload_matches_llama_and_device_list() -> None:
    """offload_supported agrees with llama.cpp (with a local GPU, for an RPC build), and one without lists no GPU."""
    import llama_cpp

    found = devices.list_devices()
    if not llama_cpp.llama_supports_rpc():  # an RPC build says yes anywhere (remote devices): a local GPU decides
        assert devices.offload_supported() == bool(llama_cpp.llama_supports_gpu_offload())
    has_gpu = any(d.type.holds_layers for d in found)
    assert devices.offload_supported() == has_gpu


def test_cpu_build_sees_a_cpu_device() -> None:
    if devices.offload_supported():
        pytest.skip("this llama.cpp build offloads to a GPU; the CPU-only expectations do not apply")
    found = devices.list_devices()
    assert found, "the ggml device API is bound on this llama-cpp-python, so it must list the CPU"
    cpu = [d for d in found if d.type is DeviceType.CPU]
    assert len(cpu) == 1
    assert cpu[0].name == "CPU"
    assert cpu[0].total_bytes > 0
    assert 0 < cpu[0].free_bytes <= cpu[0].total_bytes
    assert cpu[0].summary().startswith("CPU (CPU") and cpu[0].summary().endswith(" GiB RAM")
    assert offload_free_bytes(found) == 0


def test_listing_twice_is_stable_and_backends_load_once() -> None:
    first = [(d.name, d.type) for d in devices.list_devices()]
    registered = devices.load_dynamic_backends()
    assert registered >= 1
    assert devices.load_dynamic_backends() == registered
    assert [(d.name, d.type) for d in devices.list_devices()] == first


def test_device_type_codes() -> None:
    assert DeviceType.from_code(0) is DeviceType.CPU
    assert DeviceType.from_code(1) is DeviceType.GPU
    assert DeviceType.from_code(2) is DeviceType.IGPU
    assert DeviceType.from_code(3) is DeviceType.ACCEL
    assert DeviceType.from_code(99) is DeviceType.UNKNOWN
    assert [t for t in DeviceType if t.holds_layers] == [DeviceType.GPU, DeviceType.IGPU]


def test_offload_free_bytes_counts_only_layer_holding_devices() -> None:
    found = [
        _dev(DeviceType.CPU, 64 * GIB),
        _dev(DeviceType.GPU, 10 * GIB, 24 * GIB),
        _dev(DeviceType.GPU, 5 * GIB, 24 * GIB),
        _dev(DeviceType.ACCEL, 64 * GIB),
        _dev(DeviceType.IGPU, 1 * GIB),
    ]
    assert offload_free_bytes(found) == 16 * GIB
    assert offload_free_bytes([]) == 0


def test_summary_without_memory_or_duplicate_description() -> None:
    dev = BackendDevice("BLAS", "BLAS", DeviceType.ACCEL, 0, 0)
    assert dev.summary() == "BLAS (ACCEL)"
    gpu = BackendDevice("CUDA0", "NVIDIA H200", DeviceType.GPU, 139 * GIB, 140 * GIB)
    assert gpu.summary() == "CUDA0 (GPU, NVIDIA H200): 139.0/140.0 GiB free"


def test_build_info_describes_this_build() -> None:
    info = devices.build_info()
    assert info.offload == devices.offload_supported()
    assert [d.name for d in info.devices] == [d.name for d in devices.list_devices()]
    assert "CPU" in info.system_info and not info.system_info.endswith("|")
    lines = info.lines()
    assert lines[0].startswith("llama-cpp-python ")
    assert lines[1].startswith("GPU offload: " + ("yes" if info.offload else "no"))
    assert any(line.startswith("device: CPU") for line in lines)
    data = info.to_json()
    listed = data["devices"]
    assert isinstance(listed, list)
    assert data["offload"] is info.offload and listed[0]["type"] in {t.name for t in DeviceType}
