"""The composite's tuning, in one place: every constant with what it does and the measurement that set it.

The parts read each constant from this module when they run (``tuning.PROBE_EVERY``), so a replay can switch
a part off by setting one here (``benchmarks/composite_replay.py --ablate``). :data:`CONSTANTS` describes
each one; ``python benchmarks/composite_constants.py`` prints them as the table in docs/benchmarks.md
("The composite's constants"). "Unmeasured" means the value was chosen when the part was written and no run
has tested another value: the first candidates for a replay before anyone tunes them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from specchat.core.engine import lookup

# Lookup: the candidates, and the keys their acceptance is kept under.
MAX_NGRAM = 6
MAX_MATCH = 32
MATCH_KEYS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)
MIN_MEMORY_NGRAM = 2
RESUME_LOOK_BACK = lookup.RESUME_LOOK_BACK
RESUME_ALIGNED = lookup.RESUME_ALIGNED
RESUME_REACH = lookup.RESUME_REACH
RESUME_GUESS_EDIT = 3
LOOKUP_PRIORS: dict[int, tuple[float, float]] = {
    -2: (0.35, 0.80),  # a guess: the copy resumes past the tokens an edit replaced (lookup.guess_resumed)
    -1: (0.30, 0.80),  # a guess: the copy resumes where an edit inserted tokens
    0: (0.60, 0.80),  # a copy resumed after an edit (lookup.resume_copy)
    1: (0.21, 0.58),
    2: (0.57, 0.69),
    3: (0.64, 0.72),
    4: (0.70, 0.72),
    5: (0.70, 0.78),
    6: (0.75, 0.80),
    8: (0.80, 0.90),
    12: (0.90, 0.95),
    16: (0.95, 0.95),
    24: (0.95, 0.95),
    32: (0.97, 0.95),
}

# Acceptance tables: how they start, learn and forget.
POSITIONS = 8
PRIOR_STRENGTH = 4.0
TABLE_DECAY = 0.95
MODEL_PRIOR = 0.6
MODEL_PRIOR_STRENGTH = 1.0
CONFIDENCE_EDGES = (0.3, 0.5, 0.7, 0.85, 0.95, 0.99)
CONFIDENCE_STRENGTH = 8.0
CONFIDENCE_DECAY = 0.98

# Rounds: forced model rounds, probes, hand-overs.
UNMEASURED_TRIES = 3
PROBE_EVERY = 8
PROBE_DEPTH = 3
MIN_HANDOVER_MATCH = 4

# What rounds took (RealisedCosts), against the model of costs.
RETRY_EVERY = 24
READ_RETRY_REPLIES = 3
READ_UNTIMED = True
READ_MARGIN = 3.0
STEP_EVERY_MAX = 96

# The model's costs, in units of the target's one-token pass measured at the same time.
TIMING_DECAY = 0.8
TIMING_CLIP = 2.5
CATCH_UP_SHARE = 0.5
MIN_CATCH_UP = 4
MIN_READ = 16

# The stop plan's resolution.
STOP_GRID = np.linspace(0.0, 1.0, 257)  # the survival probabilities drafting on is valued at
PLAN_ITERATIONS = 2  # re-plannings at the rate the plan achieves


@dataclass(frozen=True)
class Constant:
    """One tuning constant as the docs' table shows it."""

    names: tuple[str, ...]  # one row may show several constants that act together
    what: str
    set_by: str
    module: str = __name__  # where it lives (one row names a constant of the cost model)
    shown: str = ""  # its value as the table shows it ("": the values as written)

    def value(self) -> str:
        """The value(s) as the table shows them."""
        if self.shown:
            return self.shown
        module = importlib.import_module(self.module)
        return ", ".join(_shown(getattr(module, name)) for name in self.names)

    def row(self) -> str:
        """The constant as a Markdown table row."""
        prefix = "" if self.module == __name__ else self.module.rsplit(".", 1)[-1] + "."
        names = ", ".join(f"`{prefix}{name}`" for name in self.names)
        return f"| {names} | {self.value()} | {self.what} | {self.set_by} |"


def _shown(value: object) -> str:
    """A value as the table shows it: whole floats without their point, runs of whole numbers as ``1-6``,
    other tuples by their ends."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        runs: list[list[int]] = []
        for v in value:
            if runs and v == runs[-1][-1] + 1:
                runs[-1].append(v)
            else:
                runs.append([v])
        return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
    if isinstance(value, tuple) and len(value) > 2:
        return f"{_shown(value[0])} ... {_shown(value[-1])}"
    return str(value)


CONSTANTS: tuple[Constant, ...] = (
    Constant(("MAX_NGRAM",), "longest n-gram looked up (each shorter one is a candidate too)", "unmeasured"),
    Constant(
        ("MAX_MATCH",),
        "how far back a match is followed to measure its real length",
        'lookup priors (benchmarks-notebook.md, "Earlier runs"): acceptance still grows at 24-32',
    ),
    Constant(
        ("MATCH_KEYS",),
        "match lengths whose acceptance is kept apart",
        "lookup priors: exact where the figures differ, bucketed where they have few tries",
    ),
    Constant(
        ("MIN_MEMORY_NGRAM",),
        "shortest match looked up in the lookup memory (a single token there says little)",
        "unmeasured",
    ),
    Constant(
        ("LOOKUP_PRIORS",),
        "acceptance of a lookup's first and later tokens per match key (0: a copy resumed after an edit; -1, -2: "
        "guesses of where it resumes, past an inserted word or a replaced one)",
        "`benchmarks/composite.py --priors`, about 2,000 candidates, rounded and made to grow with the match "
        '(table in benchmarks-notebook.md, "Earlier runs"); key 0: set below what the replay of a busy machine on the '
        "mixed and editing prompts measured (79% of 84 first tokens, 83% of 264 later ones kept; "
        'docs/benchmarks.md, "A copy resumed after an edit"); keys -1 and -2: near what the same replays measured '
        "(first tokens kept: an insertion 19-27% of 43-49, a replacement 33%; "
        'docs/benchmarks.md, "Where a broken copy resumes, guessed")',
        shown="table",
    ),
    Constant(
        ("RESUME_LOOK_BACK", "RESUME_ALIGNED", "RESUME_REACH", "RESUME_GUESS_EDIT"),
        "a copy an edit broke off resumes: the edit at most this long, the copy before it at least this long, "
        "the copy's next word found at most this far past the edit's length; where it is not found yet, where it "
        "resumes is guessed after an edit at most this long",
        "unmeasured: a corrected word or a renamed variable is a few tokens, and 8 tokens seen before are a copy "
        "(a match that long is kept 80-90% of the time); a guess after a longer edit is rarely kept",
    ),
    Constant(
        ("POSITIONS",), "draft positions kept apart in the acceptance tables (later ones share the last)", "unmeasured"
    ),
    Constant(
        ("PRIOR_STRENGTH",),
        "weight of a lookup prior, ageing with the cell's counts",
        "unmeasured (the ageing fixed a long match read at 29% where 5% were kept)",
    ),
    Constant(("TABLE_DECAY",), "per observation, what every reply's table keeps of a cell", "unmeasured"),
    Constant(
        ("MODEL_PRIOR", "MODEL_PRIOR_STRENGTH"),
        "the model's acceptance before any is counted, and the observations it weighs",
        "the depth controller's prior",
    ),
    Constant(("CONFIDENCE_EDGES",), "lower edges of the buckets of a model draft's probability", "unmeasured"),
    Constant(
        ("CONFIDENCE_STRENGTH",),
        "the model's average against a bucket's own counts",
        "replay, 2026-11-30: with 2, open chat's rounds ended at their first hesitant draft; with 8 every "
        "prompt but one (15 tokens) within 5% of the better single drafter",
    ),
    Constant(("CONFIDENCE_DECAY",), "what a bucket keeps of its counts per new draft in it", "unmeasured"),
    Constant(
        ("UNMEASURED_TRIES",),
        "rounds forced to a model that never drafted",
        "a test with MTP heads below their p-min (lookup waited a whole reply on them); not a speed measurement",
    ),
    Constant(
        ("PROBE_EVERY",),
        "rounds without the model before a probe",
        "live benchmark, 2026-11-29: every 16 left open chat with a dozen plain rounds",
    ),
    Constant(("PROBE_DEPTH",), "a probe's length", "unmeasured"),
    Constant(
        ("MIN_HANDOVER_MATCH",),
        "shortest match (the model's drafts included) a model round hands over to a lookup at",
        "replay of open chat, 2026-11-30: matches of one or two tokens parted within a token",
    ),
    Constant(
        ("RETRY_EVERY",),
        "rounds after which an arm not run since (plain, lookup, the model) is tried again",
        "on a busy machine the model of costs kept lookup for six replies (issue 36); a try of each other "
        "arm costs a few percent of the rounds",
    ),
    Constant(
        ("READ_RETRY_REPLIES",),
        "replies in a row without the model after which a try of it may read the "
        "prompt (a read is a reply's one-off cost)",
        "tries that read in every reply cost a fifth of the "
        "rate under load (`benchmarks/busy_default.py`); issue 36 saw six replies in a row without the model",
    ),
    Constant(
        ("READ_UNTIMED",),
        "a model that has never drafted here reads the prompt at its first chance after a reply's first round "
        "(what it would save is a guess until then)",
        "`benchmarks/composite_replay.py --window` on the mixed prompts: without it the model was never read in "
        "six replies (open chat 0.63 of the model alone); with it 0.97",
    ),
    Constant(
        ("READ_MARGIN",),
        "the model reads the prompt at once only where its expected saving over the reply is this many times the "
        "read; below it, rounds go without the model until they have lost the read's price against it (rent or buy)",
        "`composite_replay.py --window` on the mixed prompts (2026-12-04): the worst prompt's share of the better "
        "single drafter from 48% to 79% (m-proofread 48% to 97%), overall 104% to 108%; with noise over 6 seeds "
        "51% to 77%, with 5% stalls 70% to 86%; 2 and 4 tried (4: open chat down to 70% in one seed)",
    ),
    Constant(
        ("STEP_EVERY_MAX",),
        "most rounds between the timing steps of a model its timings keep out (one decode of its catch-up "
        "instead of a probe or try; from RETRY_EVERY, doubling)",
        "`composite_replay.py --read 0 --verify 50 --slope 4 --fixed 70 --step 70 --catch-up 30` (a draft step "
        "1.4 target passes, as beside two busy processes), 8 orders: a step every 24 rounds cost 5% of a reply",
    ),
    Constant(("TIMING_DECAY",), "weight of the old value in the model's timing averages", "unmeasured"),
    Constant(
        ("TIMING_CLIP",),
        "a timing counts at most this many times the model's average (one stall moves it a little)",
        "a round trace on a loaded machine (2026-12-04): one 300 ms first draft kept the model out for eight "
        "rounds at 95% acceptance; `composite_replay.py --stalls 0.05`: 1.59x to 1.67x plain over 12 seeds, no "
        "change without stalls (the value itself unmeasured)",
    ),
    Constant(
        ("CATCH_UP_SHARE",),
        "a catch-up token, in drafting steps, before one is timed",
        "measured on the demo pair: about 100 ms for 20-25 tokens (4.5 ms) against a 9.5 ms step",
    ),
    Constant(
        ("MIN_CATCH_UP",), "shortest catch-up timed per token (a shorter one is mostly its fixed part)", "unmeasured"
    ),
    Constant(("MIN_READ",), "fewest prompt tokens read whose time says what a token's read costs", "unmeasured"),
    Constant(
        ("STOP_GRID", "PLAN_ITERATIONS"),
        "the stop plan's resolution",
        "unmeasured (numerical)",
        shown=f"{len(STOP_GRID)} points, {PLAN_ITERATIONS}",
    ),
    Constant(
        ("MAX_VERIFY_SLOPE",),
        "an extra verify token costs at most this share of a one-token pass",
        "measured on CPUs: 0.1-0.2; a fit left steep by one batch at a load spike had kept every round plain",
        module="specchat.core.engine.costs",
    ),
)
"""Every tuning constant of the composite (and the cost model's cap it relies on), in the docs' order."""


def markdown_table() -> str:
    """:data:`CONSTANTS` as the Markdown table docs/benchmarks.md shows."""
    lines = ["| constant | value | what it does | set by |", "|---|---|---|---|"]
    return "\n".join(lines + [c.row() for c in CONSTANTS])
