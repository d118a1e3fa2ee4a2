"""The advisor on real small models: calibration within the budget, cancel, ranking and reasons."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from specchat.core.advise import cache
from specchat.core.advise.advisor import advise
from specchat.core.advise.calibrate import PROMPTS, measure
from specchat.core.advise.candidates import CandidateKind
from specchat.core.cancel import CancelToken
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind
from support.advice import advice_measured_at

MODELS = Path(__file__).resolve().parents[2] / "models"


def engine_prompts(draft: Path | None = None) -> tuple[Runtime, list[list[int]]]:
    runtime = Runtime.load(MODELS / "llama.gguf", draft, n_ctx=512)
    prompts = [runtime.prompt([{"role": "user", "content": text}]).tokens for _, text in PROMPTS]
    return runtime, prompts


def test_a_spent_budget_stops_after_one_round_and_a_cancel_before_any() -> None:
    runtime, prompts = engine_prompts(MODELS / "llama-q8.gguf")
    try:
        drafter = runtime.drafter_for(DrafterKind.DRAFT_MODEL)
        late = measure(
            runtime.target_side,
            drafter,
            prompts,
            max_depth=4,
            max_tokens=32,
            deadline=time.perf_counter() - 1,
            cancel=CancelToken(),
        )
        assert (late.runs, len(late.rounds)) == (1, 1)
        full = measure(
            runtime.target_side,
            drafter,
            prompts,
            max_depth=4,
            max_tokens=32,
            deadline=time.perf_counter() + 3600,
            cancel=CancelToken(),
        )
        assert full.runs == 3 and full.drafted_rounds > 3
        assert {r.depth for r in full.rounds} >= {4, 1, 2, 3}  # the schedule walks every depth
        cancelled = CancelToken()
        cancelled.cancel()
        none = measure(
            runtime.target_side,
            drafter,
            prompts,
            max_depth=4,
            max_tokens=32,
            deadline=time.perf_counter() + 3600,
            cancel=cancelled,
        )
        assert (none.runs, none.rounds) == (0, [])
    finally:
        runtime.close()


def test_the_advisor_ranks_explains_refuses_and_remembers(library: Path) -> None:
    target = library / "target.gguf"
    seen: list[tuple[str, float]] = []
    advice = advise(
        target,
        [MODELS / "llama-seed2-q8.gguf"],
        budget_seconds=120,
        library=False,
        progress=lambda message, fraction: seen.append((message, fraction)),
        max_tokens=32,
    )
    assert not advice.cancelled
    assert seen[-1][0] == "done"
    assert all(0.0 <= f <= 1.0 for _, f in seen)
    assert any("llama-seed2-q8.gguf: chat prompt" in m for m, _ in seen)
    results = {r.candidate.label: r for r in advice.results}
    other, lookup = results["llama-seed2-q8.gguf"], results["n-gram lookup"]
    assert other.prediction is not None and lookup.prediction is not None
    # Random weights of another seed never agree with the target: 0% at every position, plain is best.
    assert other.prediction.curve[0] == 0.0 and other.prediction.best_depth == 0
    assert other.reason == "accepts only 0% of drafts"
    ranked = [r.speedup for r in advice.results if r.prediction is not None]
    assert ranked == sorted(ranked, reverse=True)
    assert advice.plain_tokens_per_second > 0
    assert cache.lookup(target, "draft", MODELS / "llama-seed2-q8.gguf") is not None
    winner = advice.winner
    if winner is not None:  # which one wins depends on this machine; a winner is always confirmed
        assert winner.reason == "fastest here"
        assert winner.confirmation is not None and winner.confirmation.identical


def test_the_automatic_drafter_on_the_targets_heads_is_measured(tmp_path: Path) -> None:
    """The automatic drafter is measured like any other: here on the MTP heads, beside the heads alone."""
    target = tmp_path / "qwen35-mtp.gguf"  # alone: tests/models also holds drafter heads the finder would list
    shutil.copy(MODELS / "qwen35-mtp.gguf", target)
    advice = advise(
        target, budget_seconds=60, library=False, catalog=False, composite=True, max_tokens=32, remember=False
    )
    results = {r.candidate.kind: r for r in advice.results}
    assert set(results) == {CandidateKind.MTP, CandidateKind.COMPOSITE, CandidateKind.NGRAM}
    for kind in (CandidateKind.MTP, CandidateKind.COMPOSITE):
        assert results[kind].prediction is not None, results[kind].reason


def test_cancel_returns_what_was_measured(library: Path) -> None:
    cancel = CancelToken()

    def progress(message: str, fraction: float) -> None:
        if "good-draft.gguf" in message:
            cancel.cancel()

    advice = advise(
        library / "target.gguf",
        budget_seconds=120,
        library=False,
        named=[library / "good-draft.gguf"],
        cancel=cancel,
        progress=progress,
    )
    assert advice.cancelled
    kinds = {r.candidate.kind for r in advice.results}
    assert CandidateKind.DRAFT in kinds
    assert cache.lookup(library / "target.gguf", "draft", library / "good-draft.gguf") is None  # not stored


def test_a_pick_that_measured_slower_than_plain_decoding_is_no_winner() -> None:
    assert advice_measured_at(0.87).winner is None  # predicted 1.29x, but plain decoding measured faster
    assert advice_measured_at(1.2).winner is not None
