"""Whether a pair fits this machine's memory, as the model picker says it before loading."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specchat.core.models.placement import DEFAULT_RESERVE_BYTES, layers_bytes, plan_gpu_layers
from specchat.core.models.shape import ModelShape, read_model_shape
from specchat.core.types import GPU_LAYERS_AUTO

GB = 1e9  # sizes shown as the hub and the catalog show them (decimal GB)


@dataclass(frozen=True)
class MachineMemory:
    """Memory a new model can use: available RAM, and free memory on layer-holding GPUs."""

    ram_free: int  # bytes; 0 when unknown
    gpu_free: int  # bytes; 0 without offload
    remote_free: int = 0  # bytes free on remote devices (RPC) for the target's layers; 0 without servers


@dataclass(frozen=True)
class Fit:
    """A verdict (``ok`` False means loading will swap or fail) and one line saying why."""

    ok: bool
    text: str


def _meminfo_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Linux's MemAvailable: free RAM plus what the kernel can reclaim, in bytes."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine_memory() -> MachineMemory:
    """This machine's memory as llama.cpp's devices (and, on Linux, the kernel) report it."""
    from specchat.core.llama.devices import DeviceType, list_devices, offload_free_bytes, offload_supported

    devices = list_devices()
    # ggml's CPU device reports all of RAM as free on Linux; MemAvailable is the honest figure there.
    ram = _meminfo_available()
    if ram is None:
        ram = sum(d.free_bytes for d in devices if d.type is DeviceType.CPU)
    gpu = offload_free_bytes(devices) if offload_supported() else 0
    return MachineMemory(ram_free=ram, gpu_free=gpu)


def _gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


def _ram_fit(need: float, memory: MachineMemory, what: str) -> Fit:
    if memory.ram_free <= 0:
        return Fit(True, f"{what} needs about {_gb(need)} of memory")
    if need <= memory.ram_free:
        return Fit(True, f"{what} needs about {_gb(need)} of RAM; {_gb(memory.ram_free)} is free")
    return Fit(
        False,
        f"{what} needs about {_gb(need)} of RAM but only {_gb(memory.ram_free)} is free: "
        "expect heavy swapping or a failed load",
    )


def _marked(ok: bool, text: str) -> Fit:
    return Fit(ok, f"{'✓' if ok else '✗'} {text}")


def _all_in_ram(need: float, memory: MachineMemory, what: str) -> Fit:
    """The verdict with no GPU to help: marked when the free RAM is known, a plain estimate when not."""
    ram = _ram_fit(need, memory, what)
    return _marked(ram.ok, ram.text) if memory.ram_free > 0 else ram


def fit_pair(target: ModelShape, draft: ModelShape | None, n_ctx: int, memory: MachineMemory) -> Fit:
    """Where the pair would run with "auto" GPU layers, and whether the rest fits in RAM."""
    n_ctx = target.usable_context(n_ctx)
    t_bytes = target.memory_bytes(n_ctx)
    d_bytes = draft.memory_bytes(n_ctx) if draft is not None else 0
    need = t_bytes + d_bytes
    what = "the pair" if draft is not None else "the model"
    if memory.remote_free > 0:
        return _remote_fit(target, draft, n_ctx, t_bytes, memory)
    if memory.gpu_free <= 0:
        return _all_in_ram(need, memory, what)
    t, d = plan_gpu_layers(GPU_LAYERS_AUTO, GPU_LAYERS_AUTO, target, draft, n_ctx=n_ctx, free_bytes=memory.gpu_free)
    on_gpu = layers_bytes(t, t_bytes, target.n_layers) + (layers_bytes(d, d_bytes, draft.n_layers) if draft else 0)
    if t == -1 and (draft is None or d == -1):
        return _marked(True, f"{what} fits in GPU memory: about {_gb(need)} of {_gb(memory.gpu_free)} free")
    parts = []
    if draft is not None:
        parts.append("draft all" if d == -1 else f"draft {d}/{draft.n_layers} layers")
    parts.append(f"target {t}/{target.n_layers} layers")
    rest = _ram_fit(need - on_gpu, memory, "the rest")
    return _marked(rest.ok, f"on the GPU: {', '.join(parts)}; {rest.text}")


def _remote_fit(target: ModelShape, draft: ModelShape | None, n_ctx: int, t_bytes: float, memory: MachineMemory) -> Fit:
    """The target's layers on remote devices (a CPU server lends its free RAM), the draft here."""
    budget = memory.remote_free - DEFAULT_RESERVE_BYTES  # as the placement keeps it free
    if t_bytes <= budget:
        ok, text = True, f"the target on the remote devices: about {_gb(t_bytes)} of {_gb(memory.remote_free)} free"
    else:
        rest = _ram_fit(t_bytes - max(budget, 0), memory, "the rest")
        ok = rest.ok
        text = (
            f"the target needs about {_gb(t_bytes)}, more than the remote devices' {_gb(memory.remote_free)} "
            f"free less {_gb(DEFAULT_RESERVE_BYTES)} for compute; {rest.text}"
        )
    if draft is not None:
        local = fit_pair(draft, None, n_ctx, MachineMemory(memory.ram_free, memory.gpu_free))
        ok = ok and local.ok
        text += "; the draft here: " + local.text.removeprefix("✓ ").removeprefix("✗ ").replace("the model", "it")
    return _marked(ok, text)


def fit_files(
    target: str | Path,
    draft: str | Path | None,
    n_ctx: int,
    memory: MachineMemory,
    *,
    read: Callable[[Path], ModelShape] = read_model_shape,
) -> Fit:
    """:func:`fit_pair` on model files; raises GgufReadError (one line) when a header cannot be read.

    ``read`` lets a caller that asks often (the picker, on every keystroke) cache the headers.
    """
    draft_shape = read(Path(draft)) if draft is not None else None
    return fit_pair(read(Path(target)), draft_shape, n_ctx, memory)


def fit_estimate(memory_gb: float, memory: MachineMemory) -> Fit:
    """A catalog pair's memory estimate against this machine (GPU memory when it can offload, else RAM)."""
    need = memory_gb * GB
    if memory.gpu_free <= 0:
        return _all_in_ram(need, memory, "this pair")
    usable = max(memory.gpu_free - DEFAULT_RESERVE_BYTES, 0)  # as the placement keeps it free
    if need <= usable:
        return _marked(True, f"fits in GPU memory ({_gb(memory.gpu_free)} free)")
    rest = _ram_fit(need - usable, memory, "the rest")
    return _marked(rest.ok, f"partly on the GPU ({_gb(memory.gpu_free)} free); {rest.text}")
