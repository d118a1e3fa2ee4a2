"""Models load without llama.cpp's AMX buffers where the CPU backend uses AMX (its matrix multiply crashes there)."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.core.llama.backend import extra_buffers_safe
from specchat.core.llama.context import Context
from specchat.core.llama.model import Model
from specchat.core.models.demo import DemoPair

_AMX = "CPU : SSE3 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
_NO_AMX = "CPU : SSE3 = 1 | AVX2 = 1 | FMA = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"


def test_extra_buffers_are_left_out_only_where_the_cpu_backend_uses_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECCHAT_CPU_EXTRA_BUFFERS", raising=False)
    assert not extra_buffers_safe(_AMX)
    assert extra_buffers_safe(_NO_AMX)
    monkeypatch.setenv("SPECCHAT_CPU_EXTRA_BUFFERS", "1")
    assert extra_buffers_safe(_AMX)


def test_a_quantized_model_decodes_a_batch_on_this_cpu(demo_pair: DemoPair) -> None:
    """The demo pair's Q4_1 draft, whose first batched decode crashed the process on an AMX machine: it loads with
    the extra buffers where this CPU allows them, and its logits agree between a batch and single tokens."""
    model = Model(demo_pair.draft)
    assert model.extra_buffers == extra_buffers_safe()
    tokens = model.tokenize("The old train left the valley station at dawn.")
    batched = Context(model, n_ctx=256, n_threads=2)
    rows = batched.decode(tokens, all_logits=True).copy()
    single = Context(model, n_ctx=256, n_threads=2)
    last = np.empty(0, dtype=np.float32)
    for token in tokens:
        last = single.decode([token]).copy()
    batched.close()
    single.close()
    assert np.isfinite(rows).all()
    assert int(np.argmax(rows[-1])) == int(np.argmax(last)) or np.max(last) - last[int(np.argmax(rows[-1]))] < 1e-2
