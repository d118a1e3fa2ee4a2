"""The composite drafter: each round, n-gram lookup, the model drafter, or a lookup span the model continues.

The candidates of a round are the lookup proposals (the continuation of the
latest earlier match of the last n tokens, for several n, in the
conversation and then in the optional lookup memory), the model drafter's
proposal (a draft model or the target's MTP heads) and, with a draft model,
the splice: a whole lookup span continued by the model. Each candidate at
each length gets an expected rate, expected tokens over expected seconds,
from acceptance kept per source, per match length and per position
(:class:`AcceptanceTable`) and from measured costs (the depth controller's
verify cost and overhead, the model's own draft timings; lookup is nearly
free). The choice is made before any token is drawn and depends only on
the committed text and past rounds, so every token is still drawn from the
q its source reports (one-hot for lookup) and the verdict stays lossless.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specchat.core.engine.drafters import (
    Draft,
    Drafter,
    DraftModelDrafter,
    DraftRequest,
    MtpDrafter,
    lookup_at,
)
from specchat.core.engine.sampling import Distribution
from specchat.core.types import DrafterKind, DraftSource

MAX_NGRAM = 6
"""Longest match the lookup tries; every length down to 1 is a candidate of its own."""
MIN_MEMORY_NGRAM = 2
"""Shortest match looked up in the lookup memory: a single token there says little."""
POSITIONS = 8
"""Positions kept apart in the acceptance table; later positions share the last entry."""
PROBE_EVERY = 16
"""After this many rounds without the model, one round drafts with it so its acceptance stays current."""
PROBE_DEPTH = 2


def lookup_prior(match: int) -> float:
    """Acceptance expected of a lookup before any is measured: a longer match is likelier to go on as before."""
    return min(0.9, 0.45 + 0.08 * match)


class AcceptanceTable:
    """Per (source, key) and position: how often a draft there was accepted, given the ones before it were.

    Counts decay with each new observation of a cell, so the estimate follows a
    change within a few rounds, and start from a prior (``priors`` per source;
    for lookup :func:`lookup_prior` of the match length) with the weight of
    ``strength`` observations.
    """

    def __init__(self, priors: dict[DraftSource, float], *, strength: float = 1.0, decay: float = 0.95) -> None:
        self.priors = priors
        self.strength = strength
        self.decay = decay
        self._cells: dict[tuple[DraftSource, int, int], tuple[float, float]] = {}  # -> (hits, tries)

    def rates(self, source: DraftSource, key: int, n: int) -> list[float]:
        """Estimated acceptance at positions 0..n-1 of a ``source`` span with ``key`` (the lookup's match length).

        A position seldom seen leans on the one before it (the source's prior for the first), so deep
        positions, checked only when shallower ones pass, start from what those showed.
        """
        out: list[float] = []
        prior = lookup_prior(key) if source is DraftSource.LOOKUP else self.priors.get(source, 0.5)
        for position in range(n):
            if position < POSITIONS:
                hits, tries = self._cells.get((source, key, position), (0.0, 0.0))
                prior = (hits + prior * self.strength) / (tries + self.strength)
            out.append(prior)
        return out

    def rate(self, source: DraftSource, key: int, position: int) -> float:
        """Estimated acceptance at ``position`` (see :meth:`rates`)."""
        return self.rates(source, key, position + 1)[position]

    def record(self, source: DraftSource, key: int, position: int, accepted: bool) -> None:
        """Count one draft at ``position``: accepted or not (only the first rejected one of a span counts)."""
        cell = (source, key, min(position, POSITIONS - 1))
        hits, tries = self._cells.get(cell, (0.0, 0.0))
        self._cells[cell] = (self.decay * hits + (1.0 if accepted else 0.0), self.decay * tries + 1.0)

    def record_span(self, source: DraftSource, key: int, start: int, length: int, n_accepted: int,
                    censored: bool = False) -> None:
        """Count a span of ``length`` drafts of which the first ``n_accepted`` were accepted.

        ``censored``: the outcome after them is unknown (the span ran past what was checked).
        """
        for i in range(min(n_accepted, length)):
            self.record(source, key, start + i, True)
        if n_accepted < length and not censored:
            self.record(source, key, start + n_accepted, False)


@dataclass(frozen=True)
class Costs:
    """What one round costs, in seconds: the model's draft steps, and the target's verify and overhead."""

    model_fixed: float  # the model drafter's first draft in steady state (its 1-2 token catch-up and pass)
    model_step: float  # each further model draft: a decode plus its distribution and draw
    catch_up_token: float  # each token the draft model decodes (batched) to catch up before drafting
    verify: tuple[float, ...]  # verify[n]: a batch of n tokens (index 0 unused)
    overhead_plain: float
    overhead_drafted: float
    behind: int = 0  # committed tokens the draft model has not decoded yet (after lookup rounds)

    def model(self, n: int, span: int = 0) -> float:
        """The model drafting ``n`` tokens after a lookup span of ``span`` tokens."""
        if n == 0:
            return 0.0
        return self.model_fixed + (n - 1) * self.model_step + (self.behind + span) * self.catch_up_token

    def round(self, n_tokens: int, model_tokens: int, span: int) -> float:
        """Seconds for a round of ``n_tokens`` drafts: a lookup span of ``span``, then ``model_tokens`` model ones."""
        seconds = self.verify[n_tokens + 1] + (self.overhead_drafted if n_tokens else self.overhead_plain)
        return seconds + self.model(model_tokens, span)


@dataclass(frozen=True)
class Candidate:
    """One way to draft a round: ``lookup`` tokens (from a match of ``match`` tokens) then ``model`` model tokens."""

    lookup: tuple[int, ...]
    match: int
    model: int
    rate: float  # expected tokens per second

    @property
    def label(self) -> str:
        if self.lookup and self.model:
            return "splice"
        if self.lookup:
            return "lookup"
        return "model" if self.model else "plain"


def choose(lookups: Sequence[tuple[int, tuple[int, ...]]], k: int, table: AcceptanceTable, costs: Costs,
           model_source: DraftSource | None, can_splice: bool) -> Candidate:
    """The candidate with the highest expected tokens per second (ties: the earlier, shorter one).

    ``lookups``: (match length, proposal) pairs; ``model_source``: None when no model can draft.
    A deterministic function of its arguments.
    """
    best = Candidate((), 0, 0, 1.0 / costs.round(0, 0, 0))

    def consider(lookup: tuple[int, ...], match: int, model: int, expected: float) -> None:
        nonlocal best
        rate = expected / costs.round(len(lookup) + model, model, len(lookup))
        if rate > best.rate * (1.0 + 1e-9):
            best = Candidate(lookup, match, model, rate)

    model_rates = table.rates(model_source, 0, k) if model_source is not None else []

    def model_run(expected: float, survive: float, start_len: int, span: tuple[int, ...], match: int) -> None:
        for j in range(k - start_len):
            survive *= model_rates[j]
            expected += survive
            consider(span, match, j + 1, expected)

    if model_source is not None:
        model_run(1.0, 1.0, 0, (), 0)
    for match, proposal in lookups:
        expected, survive = 1.0, 1.0
        rates = table.rates(DraftSource.LOOKUP, match, min(len(proposal), k))
        for i in range(len(rates)):
            survive *= rates[i]
            expected += survive
            consider(proposal[: i + 1], match, 0, expected)
        span = proposal[:k]
        if can_splice and model_source is not None and len(span) < k:
            model_run(expected, survive, len(span), span, match)
    return best


@dataclass
class _Pending:
    """A round's proposals, kept until the next round shows what the target committed."""

    base: int  # len(tokens) when drafted
    drafted: list[int]
    sources: list[DraftSource]
    match_lengths: list[int]
    lookups: list[tuple[int, tuple[int, ...]]]  # every lookup proposal, drafted or not


class CompositeDrafter(Drafter):
    """Per round the best of n-gram lookup, the model drafter and their splice (see the module docstring)."""

    kind = DrafterKind.COMPOSITE
    own_depth = True

    def __init__(self, model: DraftModelDrafter | MtpDrafter, *, memory: np.ndarray | None = None,
                 max_ngram: int = MAX_NGRAM) -> None:
        self.model = model
        self.model_source = model.source
        self.can_splice = isinstance(model, DraftModelDrafter)  # MTP heads draft only from the target's state
        self.memory = memory  # token ids of the lookup memory, searched after the conversation
        self.max_ngram = max_ngram
        self.table = AcceptanceTable({self.model_source: 0.6})
        self.wins: dict[str, int] = {"plain": 0, "lookup": 0, "model": 0, "splice": 0}
        self._model_fixed: float | None = None
        self._model_step: float | None = None
        self._catch_up_token: float | None = None
        self._since_model = 0
        self._pending: _Pending | None = None

    def prefill(self, tokens: Sequence[int]) -> None:
        self._pending = None
        self.model.prefill(tokens)

    def lookups(self, tokens: Sequence[int], k: int) -> list[tuple[int, tuple[int, ...]]]:
        """The distinct lookup proposals (match length, tokens), longest match first."""
        seq = np.asarray(tokens, dtype=np.int64)
        found: list[tuple[int, tuple[int, ...]]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_ngram, len(seq) - 1), 0, -1):
            proposal = tuple(lookup_at(seq, k, n))
            if not proposal and self.memory is not None and n >= MIN_MEMORY_NGRAM:
                proposal = tuple(lookup_at(seq, k, n, self.memory))
            if proposal and proposal not in seen:
                seen.add(proposal)
                found.append((n, proposal))
        return found

    def costs(self, request: DraftRequest) -> Costs:
        """This round's cost estimates, from the depth controller and the model's own timings."""
        adaptive = request.costs
        n_max = request.k + 2
        if adaptive is not None and adaptive.measured_plain():
            verify = tuple(adaptive.verify_cost(n) for n in range(n_max))
            plain, drafted = adaptive.overhead(False), adaptive.overhead(True)
        else:
            verify = tuple(1.0 + 0.3 * (n - 1) for n in range(n_max))  # a CPU-like shape, in units of one pass
            plain = drafted = 0.0
        step = self._model_step if self._model_step is not None else 0.3 * verify[1]
        fixed = self._model_fixed if self._model_fixed is not None else step
        catch_up = self._catch_up_token if self._catch_up_token is not None else 0.5 * step
        return Costs(fixed, step, catch_up if self.can_splice else 0.0, verify, plain, drafted,
                     self._behind(request.tokens))

    def _behind(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` the draft model has yet to decode (0 for MTP heads: they follow the target)."""
        held = getattr(getattr(self.model, "context", None), "tokens", None)
        if not self.can_splice or held is None:
            return 0
        n = min(len(held), len(tokens))
        same = 0
        while same < n and held[same] == tokens[same]:
            same += 1
        return max(0, len(tokens) - same - 1)

    def draft(self, request: DraftRequest) -> Draft:
        tokens = request.tokens
        self._observe(tokens)
        k = request.k
        if k <= 0:
            return Draft()
        lookups = self.lookups(tokens, k)
        best = choose(lookups, k, self.table, self.costs(request), self.model_source, self.can_splice)
        if not best.model and self._since_model >= PROBE_EVERY:
            best = Candidate(best.lookup if self.can_splice else (), best.match, min(PROBE_DEPTH, k), 0.0)
            if len(best.lookup) + best.model > k:
                best = Candidate((), 0, min(PROBE_DEPTH, k), 0.0)
        self.wins[best.label] += 1
        out = Draft()
        span = list(best.lookup)
        out.tokens = span[:]
        out.q = [Distribution.one_hot(t) for t in span]
        out.probs = [1.0] * len(span)
        out.sources = [DraftSource.LOOKUP] * len(span)
        out.match_lengths = [best.match] * len(span)
        out.top = [((t, 1.0),) for t in span]
        if best.model:
            self._since_model = 0
            self._draft_model(out, request, best.model)
        else:
            self._since_model += 1
            out.step_seconds = 0.0 if span else None
        self._pending = _Pending(len(tokens), out.tokens[:], out.sources[:], out.match_lengths[:], lookups)
        return out

    def _draft_model(self, out: Draft, request: DraftRequest, n: int) -> None:
        """Append up to ``n`` model drafts after ``out``'s lookup span, and time them."""
        ahead = [*request.tokens, *out.tokens] if out.tokens else request.tokens
        behind = self._behind(ahead)
        started = time.perf_counter()
        drafted = self.model.draft(dataclasses.replace(request, tokens=ahead, k=n))
        seconds = time.perf_counter() - started
        out.tokens += drafted.tokens
        out.q += drafted.q
        out.probs += drafted.probs
        out.sources += [self.model_source] * len(drafted.tokens)
        out.match_lengths += [0] * len(drafted.tokens)
        out.top += drafted.top
        out.step_seconds, out.sync_seconds = drafted.step_seconds, drafted.sync_seconds
        out.sample_seconds = drafted.sample_seconds
        if not drafted.tokens:
            return
        sample = drafted.sample_seconds or 0.0
        if drafted.step_seconds is not None:
            self._model_step = _ema(self._model_step, drafted.step_seconds + sample)
        # The first draft's cost: the model's catch-up when it was the usual one (a long catch-up after
        # lookup rounds, or over a splice's span, is paid once and says little about the next round).
        if drafted.sync_seconds is not None and out.sources[0] is not DraftSource.LOOKUP:
            self._model_fixed = _ema(self._model_fixed, drafted.sync_seconds + sample)
        elif self._model_fixed is None and len(drafted.tokens) == 1:
            self._model_fixed = seconds
        if behind > 2 and self._model_fixed is not None:
            # A long catch-up: what it cost beyond the usual first draft and the further steps, per token.
            extra = seconds - self._model_fixed - (len(drafted.tokens) - 1) * (self._model_step or 0.0)
            self._catch_up_token = _ema(self._catch_up_token, max(extra, 0.0) / behind)

    def _observe(self, tokens: Sequence[int]) -> None:
        """Score the previous round's drafts, and every lookup proposal, against what the target committed."""
        pending, self._pending = self._pending, None
        if pending is None or len(tokens) <= pending.base:
            return
        new = tokens[pending.base :]
        n_acc = _common_prefix(pending.drafted, new)
        # The drafted tokens, each source's span at its own positions.
        i = 0
        while i < len(pending.drafted):
            source, match = pending.sources[i], pending.match_lengths[i]
            j = i
            while j < len(pending.drafted) and pending.sources[j] is source:
                j += 1
            if i <= n_acc:  # the span was reached: the target checked it up to its first rejection
                self.table.record_span(source, match, 0, j - i, min(n_acc, j) - i)
            i = j
        # Lookup proposals not drafted: the committed tokens say how far they would have been kept.
        drafted_lookup = tuple(t for t, s in zip(pending.drafted, pending.sources, strict=True)
                               if s is DraftSource.LOOKUP)
        for match, proposal in pending.lookups:
            if drafted_lookup and proposal[: len(drafted_lookup)] == drafted_lookup:
                continue  # scored above
            c = _common_prefix(proposal, new)
            self.table.record_span(DraftSource.LOOKUP, match, 0, len(proposal), c, censored=c >= len(new))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _ema(old: float | None, new: float, decay: float = 0.8) -> float:
    return new if old is None else decay * old + (1 - decay) * new
