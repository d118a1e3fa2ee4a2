"""The tie bound: one constant, a gap just under it is a tie, just over it (and a real divergence) is not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.core.chat import race_record
from specchat.core.chat.race_record import Fork
from specchat.core.engine.verify import TIE_RELATIVE_GAP
from specchat.core.llama.context import Context
from specchat.core.llama.model import Model
from support import identity
from support.identity import Comparison, assert_same_or_tie, compare_greedy, plain_greedy

MODEL = Path(__file__).resolve().parents[1] / "models" / "llama.gguf"


def test_the_identity_tests_and_the_race_panel_share_the_measured_bound() -> None:
    assert identity.TIE_RELATIVE_GAP is TIE_RELATIVE_GAP is vars(race_record)["TIE_RELATIVE_GAP"]
    # docs/benchmarks.md, "Batch shape": the gap between two logits moved by up to 2.9e-2 of the largest logit
    # on real text of up to 4k tokens; the bound covers that and stays a small fraction of the logit range.
    assert 2.9e-2 < TIE_RELATIVE_GAP <= 5e-2


@pytest.mark.parametrize("scale", [0.55, 20.0, 40.0])
def test_a_gap_just_under_the_bound_is_a_tie_and_just_over_it_a_divergence(scale: float) -> None:
    bound = TIE_RELATIVE_GAP * scale
    under = Comparison(False, 3, 10, 11, gap=bound * 0.99, scale=scale)
    over = Comparison(False, 3, 10, 11, gap=bound * 1.01, scale=scale)
    assert under.tie and under.describe().startswith("tie at reply token 3")
    assert not over.tie and over.describe().startswith("divergence at reply token 3")
    for gap, tie in ((bound * 0.99, True), (bound * 1.01, False)):  # the race panel tells them the same way
        assert Fork(3, 5, " a", " b", gap=gap, scale=scale).tie is tie
    assert not Comparison(True).tie and not Comparison(False, 3, 10, None).tie  # identical; a reply ending early


@pytest.fixture(scope="module")
def context() -> Iterator[Context]:
    model = Model(MODEL)
    ctx = Context(model, n_ctx=256, n_threads=1)
    yield ctx
    ctx.close()
    model.close()


def test_the_helper_measures_the_gap_in_plain_decoding_and_fails_a_real_divergence(context: Context) -> None:
    prompt = context.model.tokenize("The sea was calm that morning, and the boats", add_special=True)
    plain = plain_greedy(context, prompt, 6)
    assert assert_same_or_tie(context, prompt, plain, list(plain)).identical
    context.truncate(0)
    row = np.array(context.decode(prompt)[0], dtype=np.float64)
    for token in plain[:2]:
        row = np.array(context.decode([token])[0], dtype=np.float64)
    scale = float(np.abs(row).max())
    order = np.argsort(row)
    runner_up, worst = int(order[-2]), int(order[0])
    assert plain[2] == int(order[-1])

    near = compare_greedy(context, prompt, plain, [*plain[:2], runner_up])
    assert (near.index, near.expected, near.got) == (2, plain[2], runner_up)
    assert near.gap == pytest.approx(row[plain[2]] - row[runner_up], rel=1e-6)
    assert near.scale == pytest.approx(scale)
    assert near.gap is not None and near.tie == (near.gap < TIE_RELATIVE_GAP * scale)

    far = compare_greedy(context, prompt, plain, [*plain[:2], worst, *plain[3:]])
    assert far.gap is not None and far.gap > 0.1 * scale and not far.tie  # a bug's wrong token: far over the bound
    with pytest.raises(AssertionError, match="divergence at reply token 2"):
        assert_same_or_tie(context, prompt, plain, [*plain[:2], worst, *plain[3:]], label="wrong token")
