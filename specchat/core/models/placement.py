"""Which layers of the target and the draft go to the GPU.

:func:`suggest_gpu_layers` is the policy (draft first, then the target, inside
the free device memory); :func:`plan_gpu_layers` applies it to two model
shapes and the user's requests ("auto" or fixed counts); :func:`resolve_gpu_layers`
asks llama.cpp for the devices' free memory and reads the shapes from the
files. The llama.cpp that llama-cpp-python bundles has no entry point that
fits layers to free memory, so the policy is ours.
"""

from __future__ import annotations

import logging
from pathlib import Path

from specchat.core.models.errors import GgufReadError
from specchat.core.models.shape import ModelShape, read_model_shape
from specchat.core.types import GPU_LAYERS_AUTO, GpuLayers

log = logging.getLogger(__name__)

GIB = 1 << 30
DEFAULT_RESERVE_BYTES = 1 * GIB
"""Device memory kept free for compute buffers and the driver's own context."""


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

    1. Keep ``reserve_bytes`` of ``free_bytes`` free for compute buffers and
       the driver; the rest is the budget.
    2. The draft goes first. It runs ``k`` times per round for the target's
       once, and it is small, so putting all of it on the GPU buys the most
       speed per byte. A draft that fits whole gets ``-1``; otherwise it gets
       as many layers as fit (and the target gets none).
    3. The target takes what is left: ``-1`` if its whole file fits,
       otherwise as many layers as fit.

    Sizes are what a whole model claims on the device; :func:`plan_gpu_layers`
    passes the file size (a close stand-in for the weights) plus the KV cache,
    so the reserve only has to cover compute buffers and the driver.
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


def layers_bytes(n_gpu_layers: int, model_bytes: int, n_layers: int) -> float:
    """Device memory that ``n_gpu_layers`` (llama.cpp's convention) of a model claim, by the same estimate."""
    if n_gpu_layers == 0 or n_layers <= 0:
        return 0.0
    if n_gpu_layers < 0 or n_gpu_layers > n_layers:
        return float(model_bytes)
    return n_gpu_layers * model_bytes / (n_layers + 1)


def plan_gpu_layers(
    target_request: GpuLayers,
    draft_request: GpuLayers,
    target: ModelShape,
    draft: ModelShape | None,
    *,
    n_ctx: int,
    free_bytes: int,
    reserve_bytes: int = DEFAULT_RESERVE_BYTES,
) -> tuple[int, int]:
    """Turn the requests into layer counts: fixed counts stay, "auto" ones share what is left.

    A model's size counts its weights and its KV cache for ``n_ctx`` positions
    (llama.cpp keeps an offloaded layer's cache on the device). A fixed request
    is charged first; the auto ones then follow :func:`suggest_gpu_layers`.
    """
    n_ctx = target.usable_context(n_ctx)
    t_bytes, t_layers = target.memory_bytes(n_ctx), target.n_layers
    d_bytes, d_layers = (draft.memory_bytes(n_ctx), draft.n_layers) if draft is not None else (0, 0)
    budget = float(free_bytes)
    if target_request != GPU_LAYERS_AUTO:
        budget -= layers_bytes(int(target_request), t_bytes, t_layers)
        t_bytes = t_layers = 0
    if draft_request != GPU_LAYERS_AUTO:
        budget -= layers_bytes(int(draft_request), d_bytes, d_layers)
        d_bytes = d_layers = 0
    t, d = suggest_gpu_layers(t_bytes, t_layers, d_bytes, d_layers, max(int(budget), 0), reserve_bytes=reserve_bytes)
    return (
        t if target_request == GPU_LAYERS_AUTO else int(target_request),
        d if draft_request == GPU_LAYERS_AUTO else int(draft_request),
    )


def resolve_gpu_layers(
    target: str | Path,
    draft: str | Path | None,
    target_request: GpuLayers,
    draft_request: GpuLayers,
    *,
    n_ctx: int,
) -> tuple[int, int]:
    """The layer counts to load with on this machine.

    On a build that cannot offload, "auto" is 0 (CPU). Otherwise it fits the
    models into the free memory of the devices that hold layers. A file whose
    header cannot be read gets 0 here; loading it then reports the problem.
    """
    if GPU_LAYERS_AUTO not in (target_request, draft_request):
        return int(target_request), int(draft_request)
    from specchat.core.llama.devices import list_devices, offload_free_bytes, offload_supported

    def fixed(request: GpuLayers) -> int:
        return 0 if request == GPU_LAYERS_AUTO else int(request)

    if not offload_supported():
        return fixed(target_request), fixed(draft_request)
    try:
        target_shape = read_model_shape(target)
        draft_shape = read_model_shape(draft) if draft is not None else None
    except GgufReadError as exc:
        log.warning("GPU layers: %s; loading on the CPU", exc)
        return fixed(target_request), fixed(draft_request)
    free = offload_free_bytes(list_devices())
    plan = plan_gpu_layers(target_request, draft_request, target_shape, draft_shape, n_ctx=n_ctx, free_bytes=free)
    log.info("GPU layers for %.1f GiB free: target %d, draft %d", free / GIB, *plan)
    return plan


def resolve_remote_layers(
    target: str | Path,
    draft: str | Path | None,
    target_request: GpuLayers,
    draft_request: GpuLayers,
    *,
    n_ctx: int,
    remote_free: int,
) -> tuple[int, int]:
    """Layer counts when the target's layers go to remote devices (RPC) and local GPUs, the draft to local ones.

    The draft is placed on this machine as without servers. An "auto" target
    then fits into the remote devices' free memory (a remote CPU server reports
    its machine's free RAM) plus what the draft left of the local GPUs.
    """
    _, draft_layers = resolve_gpu_layers(target, draft, 0, draft_request, n_ctx=n_ctx)
    if target_request != GPU_LAYERS_AUTO:
        return int(target_request), draft_layers
    from specchat.core.llama.devices import list_devices, offload_free_bytes

    try:
        shape = read_model_shape(target)
        draft_shape = read_model_shape(draft) if draft is not None else None
    except GgufReadError as exc:
        log.warning("remote layers: %s; putting every layer on the servers", exc)
        return -1, draft_layers
    local = [d for d in list_devices() if not d.name.startswith("RPC")]
    local_free = offload_free_bytes(local)
    if draft_shape is not None:
        local_free -= int(layers_bytes(draft_layers, draft_shape.memory_bytes(n_ctx), draft_shape.n_layers))
    budget = remote_free + max(local_free, 0) - DEFAULT_RESERVE_BYTES
    t_bytes = shape.memory_bytes(shape.usable_context(n_ctx))
    layers = -1 if t_bytes <= budget else _layers_that_fit(t_bytes, shape.n_layers, budget)
    log.info(
        "remote layers for %.1f GiB remote + %.1f GiB local free: target %d, draft %d",
        remote_free / GIB,
        max(local_free, 0) / GIB,
        layers,
        draft_layers,
    )
    return layers, draft_layers
