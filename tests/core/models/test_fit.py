"""Whether a pair fits the machine's memory, before it is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.core.models import fit
from specchat.core.models.fit import GB, MachineMemory, fit_estimate, fit_pair
from specchat.core.models.shape import ModelShape, read_model_shape

GIB = 1 << 30
TARGET = ModelShape(int(7.5 * GIB), 32, 4096, 32, 8, 128, 128)  # + 0.5 GiB KV at 4096
DRAFT = ModelShape(GIB // 2, 24, 1024, 16, 4, 64, 64)  # + 96 MiB KV at 4096


def test_cpu_only_machine_compares_with_ram(demo_pair) -> None:
    target, draft = read_model_shape(demo_pair.target), read_model_shape(demo_pair.draft)
    need = target.memory_bytes(4096) + draft.memory_bytes(4096)
    ok = fit_pair(target, draft, 4096, MachineMemory(ram_free=8 * GIB, gpu_free=0))
    assert ok.ok and ok.text == f"✓ the pair needs about {need / GB:.1f} GB of RAM; {8 * GIB / GB:.1f} GB is free"
    tight = fit_pair(target, draft, 4096, MachineMemory(ram_free=need - 1, gpu_free=0))
    assert not tight.ok and tight.text.startswith("✗ the pair needs") and "swapping" in tight.text
    unknown = fit_pair(target, None, 4096, MachineMemory(ram_free=0, gpu_free=0))
    assert unknown.ok and unknown.text.startswith("the model needs about")


def test_gpu_machine_reports_the_auto_placement() -> None:
    whole = fit_pair(TARGET, DRAFT, 4096, MachineMemory(ram_free=4 * GIB, gpu_free=24 * GIB))
    assert whole.ok and whole.text.startswith("✓ the pair fits in GPU memory")
    part = fit_pair(TARGET, DRAFT, 4096, MachineMemory(ram_free=16 * GIB, gpu_free=6 * GIB))
    assert part.ok and part.text.startswith("✓ on the GPU: draft all, target ") and "RAM" in part.text
    layers = int(part.text.split("target ")[1].split("/")[0])
    assert 0 < layers < 32
    starved = fit_pair(TARGET, DRAFT, 4096, MachineMemory(ram_free=1 * GIB, gpu_free=6 * GIB))
    assert not starved.ok and starved.text.startswith("✗ on the GPU: draft all") and "the rest needs" in starved.text


def test_catalog_estimate() -> None:
    assert fit_estimate(1.0, MachineMemory(8 * GIB, 0)).ok
    assert not fit_estimate(24.0, MachineMemory(8 * GIB, 0)).ok
    assert fit_estimate(24.0, MachineMemory(8 * GIB, 80 * GIB)).text.startswith("✓ fits in GPU memory")
    partly = fit_estimate(24.0, MachineMemory(32 * GIB, 12 * GIB))
    assert partly.ok and partly.text.startswith("✓ partly on the GPU")
    assert not fit_estimate(24.0, MachineMemory(4 * GIB, 12 * GIB)).ok


def test_this_machine_reports_its_memory() -> None:
    memory = fit.machine_memory()
    assert memory.ram_free > 0
    from specchat.core.llama.devices import offload_supported

    if not offload_supported():
        assert memory.gpu_free == 0


def test_meminfo_parsing(tmp_path: Path) -> None:
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n")
    assert fit._meminfo_available(info) == 20000000 * 1024
    info.write_text("MemTotal: 5 kB\n")
    assert fit._meminfo_available(info) is None
    assert fit._meminfo_available(tmp_path / "missing") is None


def test_longer_context_needs_more_up_to_the_trained_length() -> None:
    roomy = MachineMemory(ram_free=64 * GIB, gpu_free=0)

    def need(shape: ModelShape, n_ctx: int) -> str:
        return fit_pair(shape, DRAFT, n_ctx, roomy).text

    assert need(TARGET, 2048) != need(TARGET, 32768)
    trained = ModelShape(TARGET.file_size, 32, 4096, 32, 8, 128, 128, context_length=8192)
    assert need(trained, 8192) == need(trained, 32768)  # the engine caps the context at 8192
    assert need(trained, 2048) != need(trained, 8192)


def test_catalog_estimate_keeps_the_gpu_reserve() -> None:
    from specchat.core.models.placement import DEFAULT_RESERVE_BYTES

    exact = MachineMemory(ram_free=64 * GIB, gpu_free=int(8 * GB))
    assert fit_estimate(8.0, exact).text.startswith("✓ partly on the GPU")
    spare = MachineMemory(ram_free=64 * GIB, gpu_free=int(8 * GB) + DEFAULT_RESERVE_BYTES)
    assert fit_estimate(8.0, spare).text.startswith("✓ fits in GPU memory")


def test_fit_files_reads_the_headers(demo_pair, tmp_path: Path) -> None:
    from specchat.core.models.errors import GgufReadError

    memory = MachineMemory(ram_free=8 * GIB, gpu_free=0)
    shapes = read_model_shape(demo_pair.target), read_model_shape(demo_pair.draft)
    assert fit.fit_files(demo_pair.target, demo_pair.draft, 4096, memory) == fit_pair(*shapes, 4096, memory)
    assert fit.fit_files(demo_pair.target, None, 4096, memory) == fit_pair(shapes[0], None, 4096, memory)
    with pytest.raises(GgufReadError, match="not found"):
        fit.fit_files(demo_pair.target, tmp_path / "absent.gguf", 4096, memory)
