"""Device detection on this build, the GPU layer-placement policy and its description."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specchat.core.llama import devices
from specchat.core.llama.devices import (
    GIB,
    MIB,
    BackendDevice,
    DeviceType,
    describe_placement,
    offload_free_bytes,
    suggest_gpu_layers,
)

# --- detection on the build the tests run against ------------------------------------


def _dev(kind: DeviceType, free: int, total: int | None = None, name: str = "X") -> BackendDevice:
    return BackendDevice(name, "desc", kind, free, total if total is not None else free)


def test_offload_matches_llama_and_device_list() -> None:
    """offload_supported agrees with llama.cpp, and a build without a GPU lists no GPU."""
    from specchat.core.llama.model import supports_gpu_offload

    found = devices.list_devices()
    assert devices.offload_supported() == supports_gpu_offload()
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
    assert "CPU" in cpu[0].summary() and "GiB free" in cpu[0].summary()
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


# --- suggest_gpu_layers -------------------------------------------------------------


def test_everything_fits() -> None:
    assert suggest_gpu_layers(8 * GIB, 32, 1 * GIB, 24, 80 * GIB) == (-1, -1)


def test_nothing_free_means_cpu() -> None:
    assert suggest_gpu_layers(8 * GIB, 32, 1 * GIB, 24, 0) == (0, 0)


def test_reserve_is_kept_free() -> None:
    # Exactly the reserve free: no budget at all.
    assert suggest_gpu_layers(1 * GIB, 10, 1 * MIB, 10, 2 * GIB, reserve_bytes=2 * GIB) == (0, 0)
    # Both fit only if the reserve is ignored.
    assert suggest_gpu_layers(4 * GIB, 10, 1 * GIB, 10, 5 * GIB, reserve_bytes=0) == (-1, -1)
    assert suggest_gpu_layers(4 * GIB, 10, 1 * GIB, 10, 5 * GIB, reserve_bytes=1 * GIB)[1] == -1
    assert suggest_gpu_layers(4 * GIB, 10, 1 * GIB, 10, 5 * GIB, reserve_bytes=1 * GIB)[0] != -1


def test_default_reserve_is_one_gib() -> None:
    assert devices.DEFAULT_RESERVE_BYTES == GIB
    assert suggest_gpu_layers(0, 0, GIB, 10, GIB) == (0, 0)
    assert suggest_gpu_layers(0, 0, GIB, 10, 2 * GIB) == (0, -1)


def test_draft_first_then_partial_target() -> None:
    # 11 GiB budget after the 1 GiB reserve; the 1 GiB draft goes whole, 10 GiB left for
    # a 31 GiB target of 30 layers -> 1 GiB per layer estimate (31 / (30 + 1)) -> 10 layers.
    assert suggest_gpu_layers(31 * GIB, 30, 1 * GIB, 24, 12 * GIB) == (10, -1)


def test_draft_that_does_not_fit_gets_partial_layers_and_target_none() -> None:
    # Budget 3 GiB; a 5 GiB draft of 4 layers costs 1 GiB per layer -> 3 layers, target 0.
    assert suggest_gpu_layers(2 * GIB, 10, 5 * GIB, 4, 4 * GIB) == (0, 3)


def test_target_fits_exactly() -> None:
    assert suggest_gpu_layers(6 * GIB, 30, 2 * GIB, 10, 9 * GIB) == (-1, -1)
    # One byte too many for the whole file: all 30 repeating layers still fit, the
    # output head (the "+ 1" share) stays on the CPU.
    assert suggest_gpu_layers(6 * GIB + 1, 30, 2 * GIB, 10, 9 * GIB) == (30, -1)
    assert suggest_gpu_layers(12 * GIB, 30, 2 * GIB, 10, 9 * GIB) == (15, -1)


def test_no_draft_model_gives_target_the_whole_budget() -> None:
    assert suggest_gpu_layers(8 * GIB, 32, 0, 0, 10 * GIB) == (-1, 0)
    assert suggest_gpu_layers(33 * GIB, 32, 0, 0, 11 * GIB) == (10, 0)
    # A draft size without layers (or layers without size) is "no draft" too.
    assert suggest_gpu_layers(33 * GIB, 32, 5 * GIB, 0, 11 * GIB) == (10, 0)
    assert suggest_gpu_layers(33 * GIB, 32, 0, 12, 11 * GIB) == (10, 0)


def test_partial_count_never_exceeds_layers() -> None:
    # A model with a huge non-repeating part: the whole file does not fit, but the
    # per-layer estimate would allow more layers than exist; cap at n_layers.
    assert suggest_gpu_layers(100, 2, 0, 0, 99, reserve_bytes=0) == (2, 0)


def test_negative_inputs_rejected() -> None:
    with pytest.raises(ValueError, match="free_bytes"):
        suggest_gpu_layers(1, 1, 1, 1, -1)
    with pytest.raises(ValueError, match="target_layers"):
        suggest_gpu_layers(1, -1, 1, 1, 1)
    with pytest.raises(ValueError, match="reserve_bytes"):
        suggest_gpu_layers(1, 1, 1, 1, 1, reserve_bytes=-5)


sizes = st.integers(min_value=0, max_value=200 * GIB)
layers = st.integers(min_value=0, max_value=200)


@given(sizes, layers, sizes, layers, sizes, st.integers(min_value=0, max_value=4 * GIB))
def test_suggestion_fits_in_budget(
    target_bytes: int, target_layers: int, draft_bytes: int, draft_layers: int, free: int, reserve: int
) -> None:
    t, d = suggest_gpu_layers(target_bytes, target_layers, draft_bytes, draft_layers, free, reserve_bytes=reserve)
    assert -1 <= t <= target_layers
    assert -1 <= d <= draft_layers

    def used(value: int, nbytes: int, n: int) -> float:
        if value == -1:
            return nbytes
        return value * nbytes / (n + 1) if n else 0.0

    assert used(t, target_bytes, target_layers) + used(d, draft_bytes, draft_layers) <= max(free - reserve, 0) + 1e-6
    # The draft always gets priority: the target only gets layers once the draft is whole.
    if t != 0 and draft_bytes > 0 and draft_layers > 0:
        assert d == -1


@given(sizes, layers, sizes, layers, sizes, sizes)
def test_more_free_memory_never_offloads_less(
    target_bytes: int, target_layers: int, draft_bytes: int, draft_layers: int, free: int, extra: int
) -> None:
    def rank(value: int, n: int) -> int:
        return n + 1 if value == -1 else value

    t1, d1 = suggest_gpu_layers(target_bytes, target_layers, draft_bytes, draft_layers, free)
    t2, d2 = suggest_gpu_layers(target_bytes, target_layers, draft_bytes, draft_layers, free + extra)
    assert rank(d2, draft_layers) >= rank(d1, draft_layers)
    assert rank(t2, target_layers) >= rank(t1, target_layers)


# --- describe_placement -------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_gpu", "n_layers", "offload", "expected"),
    [
        (0, 30, True, "CPU"),
        (-1, 30, False, "CPU"),
        (12, 30, False, "CPU"),
        (-1, 30, True, "GPU (all 30 layers)"),
        (30, 30, True, "GPU (all 30 layers)"),
        (31, 30, True, "GPU (all 30 layers)"),
        (999, 30, True, "GPU (all 30 layers)"),
        (12, 30, True, "GPU 12/30 layers + CPU"),
        (1, 30, True, "GPU 1/30 layers + CPU"),
        (29, 30, True, "GPU 29/30 layers + CPU"),
        (5, 0, True, "CPU"),
    ],
)
def test_describe_placement(n_gpu: int, n_layers: int, offload: bool, expected: str) -> None:
    assert describe_placement(n_gpu, n_layers, offload) == expected
