"""The composite drafter (the window's default): per round, n-gram lookup or the model drafter.

Its parts, each in a module of its own: :mod:`.drafter` (the drafter, and at its top how a round is decided),
:mod:`.acceptance` (what it learns of how often drafts are kept), :mod:`.pricing` (what a round costs and
the choice of the best), :mod:`.timings` (the model's learnt costs) and :mod:`.tuning` (every constant, with
the measurement that set it).
"""

from specchat.core.engine.composite.acceptance import AcceptanceTable, Confidence, lookup_prior, match_key
from specchat.core.engine.composite.drafter import CompositeDrafter
from specchat.core.engine.composite.pricing import Candidate, Costs, StopPlan, arm_of, choose, lookup_tail
from specchat.core.engine.composite.timings import ModelTimings
from specchat.core.engine.composite.tuning import (
    CONFIDENCE_EDGES,
    MATCH_KEYS,
    MAX_MATCH,
    MAX_NGRAM,
    PROBE_DEPTH,
    READ_RETRY_REPLIES,
    RETRY_EVERY,
)

__all__ = [
    "CONFIDENCE_EDGES",
    "MATCH_KEYS",
    "MAX_MATCH",
    "MAX_NGRAM",
    "PROBE_DEPTH",
    "READ_RETRY_REPLIES",
    "RETRY_EVERY",
    "AcceptanceTable",
    "Candidate",
    "CompositeDrafter",
    "Confidence",
    "Costs",
    "ModelTimings",
    "StopPlan",
    "arm_of",
    "choose",
    "lookup_prior",
    "lookup_tail",
    "match_key",
]
