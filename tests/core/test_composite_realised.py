"""The composite judged by what its rounds realise: arms retried within a bound, a losing choice abandoned.

The model of costs is misled on purpose here (as a busy machine misleads it): a
draft model it believes cheap is slow, or a prompt read it believes prohibitive
is cheap. The rounds' own timings must win.
"""

from __future__ import annotations

import time

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.composite import RETRY_EVERY, CompositeDrafter
from specchat.core.engine.drafters import DraftModelDrafter, DraftRequest
from specchat.core.engine.realised import MIN_ROUNDS, RECENT_ROUNDS, RealisedRates
from specchat.core.types import DraftSource, SamplerParams

VOCAB = 50


class TruthContext:
    """A dense draft context whose next token is always ``truth``'s (the target's), each decode taking ``pause``."""

    n_ctx = 4096
    restored = False

    def __init__(self, truth: list[int], pause: float = 0.0) -> None:
        self.truth, self.pause = truth, pause
        self.tokens: list[int] = []
        self.reads = 0

    def _logits(self) -> np.ndarray:
        row = np.zeros(VOCAB, dtype=np.float32)
        row[self.truth[len(self.tokens)]] = 8.0
        return row

    def extend_to(self, tokens: list[int]) -> int:
        self.reads += 1
        time.sleep(self.pause)
        self.tokens = list(tokens)
        return 0

    def sync(self, tokens: list[int]) -> tuple[np.ndarray, int]:
        time.sleep(self.pause)
        self.tokens = list(tokens)
        return self._logits(), len(tokens) - 1

    def decode(self, tokens: list[int]) -> np.ndarray:
        time.sleep(self.pause)
        self.tokens.extend(tokens)
        return self._logits()[None, :]

    def checkpoint(self, slot: str) -> None:
        pass


def run(drafter: CompositeDrafter, truth: list[int], prompt: int, rounds: int, *, target_pass: float = 0.002,
        per_token: float = 0.0002) -> list[str]:
    """Drive ``rounds`` rounds against a target that commits ``truth``: the drafts it agrees with and one token
    more, its verify taking ``target_pass`` and ``per_token`` a draft. Returns each round's arm (plain, lookup or
    model, from the draft's sources)."""
    rng = np.random.default_rng(0)
    tokens = truth[:prompt]
    drafter.prefill(tokens[:-1])
    arms = []
    for _ in range(rounds):
        draft = drafter.draft(DraftRequest(tokens, 8, SamplerParams(), rng, CancelToken(), remaining=1000))
        time.sleep(target_pass + per_token * len(draft.tokens))
        kept = 0
        while kept < len(draft.tokens) and draft.tokens[kept] == truth[len(tokens) + kept]:
            kept += 1
        tokens = truth[: len(tokens) + kept + 1]
        sources = set(draft.sources)
        arms.append("model" if DraftSource.MODEL in sources else "lookup" if sources else "plain")
    return arms


def test_rates_count_only_recent_rounds_and_need_a_few() -> None:
    rates = RealisedRates()
    rates.record("model", 1, 5, 0.1)
    assert rates.rate("model", 1) is None  # one round says little
    rates.record("model", 2, 3, 0.1)
    assert rates.rate("model", 2) == 40.0
    assert rates.rate("model", 2 + RECENT_ROUNDS + 1) is None  # too old to compare with anything now
    assert rates.last("model") == 2 and rates.last("plain") is None
    assert MIN_ROUNDS == 2


def test_a_slow_model_the_costs_call_cheap_is_abandoned_for_plain_rounds_and_retried_within_the_bound() -> None:
    truth = [int(t) for t in np.random.default_rng(1).integers(0, VOCAB, 4000)]
    # Every draft right, each decode 30 ms: about 35 tokens a second, where a plain round here takes well under
    # a millisecond. The model of costs has no target timings and believes the model nearly free.
    drafter = CompositeDrafter(DraftModelDrafter(TruthContext(truth, pause=0.03)))
    arms = run(drafter, truth, prompt=40, rounds=100)
    assert "model" in arms[:3]  # the model of costs' choice while nothing else was measured
    assert "plain" in arms[: RETRY_EVERY + 2]  # plain tried within the bound
    assert drafter.overrides > 0
    assert arms[-40:].count("model") <= 40 // RETRY_EVERY + 1, arms  # what was realised decides
    model_rounds = [n for n, a in enumerate(arms) if a == "model"]
    gaps = [b - a for a, b in zip(model_rounds, model_rounds[1:], strict=False)]
    assert gaps and max(gaps) <= RETRY_EVERY + 1  # the abandoned model is still tried again within the bound


def test_a_model_kept_out_by_a_read_priced_as_prohibitive_is_tried_and_kept_when_it_realises_more() -> None:
    """Issue 36's busy machine: the model's prompt read was priced so dear that a reply never used it, while the
    lookups it drafted with instead kept missing."""
    rng = np.random.default_rng(2)
    truth = [int(t) for t in rng.integers(0, VOCAB, 4000)]
    context = TruthContext(truth, pause=0.0005)
    drafter = CompositeDrafter(DraftModelDrafter(context))
    drafter._model_fixed = drafter._model_step = 0.3
    drafter._read_token = 1e6  # a token's read believed to cost a million passes
    arms = run(drafter, truth, prompt=400, rounds=60)
    first_model = arms.index("model")
    assert first_model <= RETRY_EVERY + 1, arms
    assert context.reads == 1  # read once, when first tried
    assert arms[first_model:].count("model") >= 0.8 * len(arms[first_model:]), arms
