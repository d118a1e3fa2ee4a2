"""The draft finder measures real head files (the fixtures in tests/models) through advisor.HEAD_DRAFTERS."""

from __future__ import annotations

import shutil
from pathlib import Path

from specchat.core.advise.advisor import HEAD_DRAFTERS, advise
from specchat.core.types import DrafterKind

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_every_head_drafter_has_an_opener_and_the_finder_measures_a_head_beside_the_target(tmp_path: Path) -> None:
    assert set(HEAD_DRAFTERS) == {DrafterKind.EAGLE3, DrafterKind.DFLASH, DrafterKind.DSPARK}
    for name in ("llama.gguf", "eagle3-llama.gguf", "dflash-llama.gguf"):
        shutil.copy(MODELS / name, tmp_path / name)
    advice = advise(
        tmp_path / "llama.gguf", budget_seconds=60, library=False, catalog=False, max_tokens=16, max_depth=4
    )
    by_head = {r.candidate.head: r for r in advice.results if r.candidate.head}
    assert {"eagle3", "dflash"} <= set(by_head), [r.candidate.label for r in advice.results]
    for kind in ("eagle3", "dflash"):
        result = by_head[kind]
        assert result.candidate.measurable and result.prediction is not None, (kind, result.reason)
