"""GPU layer placement: the policy, the plan from model shapes and requests, and its description."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specchat.core.models import placement
from specchat.core.models.placement import describe_placement, suggest_gpu_layers
from specchat.core.models.shape import ModelShape
from specchat.core.types import GPU_LAYERS_AUTO as AUTO
from specchat.core.types import SpecchatError, parse_gpu_layers

MIB = 1 << 20
GIB = 1 << 30

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
    assert placement.DEFAULT_RESERVE_BYTES == GIB
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


# --- plan_gpu_layers: requests and model shapes -------------------------------------

# A 7.5 GiB, 32-layer target with 8 KV heads of 128 (0.5 GiB of cache at 4096
# positions) and a 0.5 GiB, 24-layer draft with 4 KV heads of 64 (96 MiB).
TARGET = ModelShape(int(7.5 * GIB), 32, 4096, 32, 8, 128, 128)
DRAFT = ModelShape(GIB // 2, 24, 1024, 16, 4, 64, 64)


def test_plan_counts_the_kv_cache() -> None:
    assert TARGET.kv_cache_bytes(4096) == GIB // 2
    need = TARGET.memory_bytes(4096) + DRAFT.memory_bytes(4096) + placement.DEFAULT_RESERVE_BYTES
    assert placement.plan_gpu_layers(AUTO, AUTO, TARGET, DRAFT, n_ctx=4096, free_bytes=need) == (-1, -1)
    # The same memory is too little once the context (and so the cache) is 8x longer.
    t, d = placement.plan_gpu_layers(AUTO, AUTO, TARGET, DRAFT, n_ctx=32768, free_bytes=need)
    assert d == -1 and 0 < t < 32


def test_plan_caps_the_context_at_the_targets_trained_length() -> None:
    short = ModelShape(TARGET.file_size, 32, 4096, 32, 8, 128, 128, context_length=4096)
    need = TARGET.memory_bytes(4096) + DRAFT.memory_bytes(4096) + placement.DEFAULT_RESERVE_BYTES
    # A million-token request would not fit, but the engine will only ever allocate 4096.
    assert placement.plan_gpu_layers(AUTO, AUTO, short, DRAFT, n_ctx=1 << 20, free_bytes=need) == (-1, -1)
    assert placement.plan_gpu_layers(AUTO, AUTO, TARGET, DRAFT, n_ctx=1 << 20, free_bytes=need)[0] == 0


def test_plan_keeps_fixed_requests_and_charges_them() -> None:
    free = 6 * GIB
    # Draft fixed on the CPU: the whole budget goes to the target.
    only_target = placement.plan_gpu_layers(AUTO, 0, TARGET, DRAFT, n_ctx=4096, free_bytes=free)
    both_auto = placement.plan_gpu_layers(AUTO, AUTO, TARGET, DRAFT, n_ctx=4096, free_bytes=free)
    assert only_target[1] == 0 and both_auto[1] == -1
    assert only_target[0] > both_auto[0] > 0
    # Target fixed at all of it: charged first, so an auto draft gets what remains.
    assert placement.plan_gpu_layers(-1, AUTO, TARGET, DRAFT, n_ctx=4096, free_bytes=free) == (-1, 0)
    assert placement.plan_gpu_layers(-1, AUTO, TARGET, DRAFT, n_ctx=4096, free_bytes=12 * GIB) == (-1, -1)
    # Two fixed requests pass through untouched, whatever the memory.
    assert placement.plan_gpu_layers(7, 3, TARGET, DRAFT, n_ctx=4096, free_bytes=0) == (7, 3)


def test_plan_without_a_draft_model() -> None:
    assert placement.plan_gpu_layers(AUTO, AUTO, TARGET, None, n_ctx=4096, free_bytes=20 * GIB) == (-1, 0)


def test_layers_bytes() -> None:
    assert placement.layers_bytes(0, 100, 4) == 0
    assert placement.layers_bytes(-1, 100, 4) == 100
    assert placement.layers_bytes(99, 100, 4) == 100
    assert placement.layers_bytes(2, 100, 4) == 40


# --- resolve_gpu_layers on real files -------------------------------------------------


def test_resolve_on_this_build(demo_pair) -> None:
    from specchat.core.llama.devices import offload_supported

    if offload_supported():
        pytest.skip("this build offloads; the CPU expectations do not apply")
    assert placement.resolve_gpu_layers(demo_pair.target, demo_pair.draft, AUTO, AUTO, n_ctx=4096) == (0, 0)
    assert placement.resolve_gpu_layers(demo_pair.target, demo_pair.draft, 5, -1, n_ctx=4096) == (5, -1)
    assert placement.resolve_gpu_layers(demo_pair.target, None, AUTO, 0, n_ctx=4096) == (0, 0)


def _pretend_gpu(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """Report one GPU with ``free`` bytes: this machine has none, the files and the policy are real."""
    from specchat.core.llama import devices

    gpu = devices.BackendDevice("CUDA0", "test GPU", devices.DeviceType.GPU, free, 2 * free)
    monkeypatch.setattr(devices, "offload_supported", lambda: True)
    monkeypatch.setattr(devices, "list_devices", lambda: [gpu])


def test_resolve_fits_the_demo_pair(demo_pair, monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat.core.models.shape import read_model_shape

    target, draft = read_model_shape(demo_pair.target), read_model_shape(demo_pair.draft)
    _pretend_gpu(monkeypatch, 80 * GIB)
    assert placement.resolve_gpu_layers(demo_pair.target, demo_pair.draft, AUTO, AUTO, n_ctx=4096) == (-1, -1)
    # Room for the draft and about half the F32 target.
    free = placement.DEFAULT_RESERVE_BYTES + draft.memory_bytes(4096) + target.memory_bytes(4096) // 2
    _pretend_gpu(monkeypatch, free)
    t, d = placement.resolve_gpu_layers(demo_pair.target, demo_pair.draft, AUTO, AUTO, n_ctx=4096)
    assert d == -1 and 10 <= t <= 16


def test_resolve_with_an_unreadable_file_falls_back_to_cpu(
    demo_pair, tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    _pretend_gpu(monkeypatch, 80 * GIB)
    assert placement.resolve_gpu_layers(demo_pair.target, bad, AUTO, AUTO, n_ctx=4096) == (0, 0)
    assert placement.resolve_gpu_layers(demo_pair.target, bad, AUTO, -1, n_ctx=4096) == (0, -1)
    assert "loading on the CPU" in caplog.text


@pytest.mark.parametrize(
    ("text", "value"), [("auto", "auto"), (" Auto ", "auto"), ("all", -1), ("-1", -1), ("0", 0), ("48", 48), (12, 12)]
)
def test_parse_gpu_layers(text: str | int, value: object) -> None:
    assert parse_gpu_layers(text) == value


@pytest.mark.parametrize("bad", ["most", "-2", "1e3", "10001", -5, True])
def test_parse_gpu_layers_rejects(bad: object) -> None:
    with pytest.raises(SpecchatError, match="GPU layers must be") as info:
        parse_gpu_layers(bad)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
