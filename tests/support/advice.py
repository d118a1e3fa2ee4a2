"""Advisor results built from plain figures, for tests of what the draft finder concludes from them."""

from __future__ import annotations

from specchat.core.advise.advisor import Advice, CandidateResult
from specchat.core.advise.candidates import Candidate, CandidateKind
from specchat.core.advise.confirm import Confirmation
from specchat.core.advise.predict import Prediction


def advice_measured_at(measured_speedup: float) -> Advice:
    """One candidate predicted at 1.29x and confirmed at ``measured_speedup``."""
    prediction = Prediction(
        rates=(10.0, 12.9), best_depth=1, auto_depth=1, acceptance=0.9, cost_ratio=0.3, curve=(0.9,)
    )
    confirmation = Confirmation(
        depth=1,
        plain_tokens=100,
        plain_seconds=10.0,
        spec_tokens=100,
        spec_seconds=10.0 / measured_speedup,
        prompts=3,
        identical=True,
    )
    return Advice(
        "target.gguf", [CandidateResult(Candidate(CandidateKind.NGRAM, "n-gram lookup"), prediction, confirmation)]
    )
