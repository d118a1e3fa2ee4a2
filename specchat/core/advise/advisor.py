"""Run the draft finder: list candidates, calibrate each within the budget, predict, confirm the winner.

The target is loaded once and keeps one context; plain decoding, n-gram lookup
and the target's own heads run on it directly, and each draft file is loaded,
measured and closed in turn. The budget (seconds, from the call) is shared out
as it goes: a phase that finishes early leaves its time to the later ones.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.core.advise import DEFAULT_BUDGET, cache
from specchat.core.advise.calibrate import CALIBRATION_DEPTH, CALIBRATION_TOKENS, PROMPTS, Measurement, run_prompt
from specchat.core.advise.candidates import Candidate, CandidateKind, find_candidates, unmeasurable_reason
from specchat.core.advise.confirm import Confirmation, confirm
from specchat.core.advise.payoff import Payoff, payoff, verify_scaling
from specchat.core.advise.payoff import remember as remember_payoff
from specchat.core.advise.predict import Prediction, losing_reason, predict
from specchat.core.cancel import CancelToken
from specchat.core.engine.costs import RoundCosts
from specchat.core.types import GPU_LAYERS_AUTO, DrafterKind, GpuLayers, SpecchatError

if TYPE_CHECKING:
    from specchat.core.engine.drafters import Drafter
    from specchat.core.llama.model import Model
    from specchat.core.runtime.runtime import Runtime

log = logging.getLogger(__name__)

Progress = Callable[[str, float], None]
HeadOpener = Callable[["Runtime", Candidate], contextlib.AbstractContextManager["Drafter"]]


@contextlib.contextmanager
def open_head_drafter(runtime: Runtime, candidate: Candidate) -> Iterator[Drafter]:
    """A head file's drafter on the loaded target, for one measurement: the head's context takes the place of
    the target's MTP heads while it is open (one observer follows the target), and gives it back after."""
    from specchat.core.engine.registry import Parts, head_entry
    from specchat.core.llama.context import Context
    from specchat.core.llama.heads import open_head
    from specchat.core.llama.model import Model
    from specchat.core.runtime.runtime import check_head_fits

    target = runtime.target_context
    if not isinstance(target, Context):
        raise SpecchatError("a drafter head needs the target on this machine, not on RPC servers")
    model = Model(candidate.path)
    kept = target.observer
    target.observer = None
    try:
        check_head_fits(runtime.target, model)
        head = open_head(target, model)
        try:
            yield head_entry(head).build(Parts(head=head))
        finally:
            head.close()
    finally:
        target.observer = kept
        target.truncate(0)  # the MTP heads (if any) catch up from scratch
        model.close()


def _head_openers() -> dict[str, HeadOpener]:
    from specchat.core.engine.registry import head_drafters

    return {entry.key: open_head_drafter for entry in head_drafters()}


HEAD_DRAFTERS: dict[str, HeadOpener] = _head_openers()
"""How the calibration opens a head file's drafter (EAGLE-3, DFlash, DSpark) on the loaded target, by drafter
kind: every head entry of the drafter registry. A head kind without one is listed with one line saying this
build cannot measure it."""
CALIBRATION_CONTEXT = 1024
MIN_DRAFTED_ROUNDS = 3  # fewer say nothing about acceptance
# Shares of the budget: plain decoding, each candidate, the confirming run.
PLAIN_WEIGHT, CANDIDATE_WEIGHT, CONFIRM_WEIGHT = 0.6, 1.0, 1.2


@dataclass
class CandidateResult:
    """A candidate and what the advisor found: its prediction, its confirmation (the winner), the reason."""

    candidate: Candidate
    prediction: Prediction | None = None
    confirmation: Confirmation | None = None
    reason: str = ""

    @property
    def speedup(self) -> float:
        return self.prediction.speedup if self.prediction is not None else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            **self.candidate.to_json(),
            "prediction": None if self.prediction is None else self.prediction.to_json(),
            "measured": None if self.confirmation is None else self.confirmation.to_json(),
            "why": self.reason,
        }


@dataclass
class Advice:
    """The ranked candidates for a target: measured ones by predicted speed-up, then the rest."""

    target: str
    results: list[CandidateResult] = field(default_factory=list)
    budget_seconds: float = DEFAULT_BUDGET
    elapsed_seconds: float = 0.0
    plain_tokens_per_second: float = 0.0
    cancelled: bool = False
    skipped: list[str] = field(default_factory=list)
    payoff: Payoff | None = None  # whether speculation can pay on this backend, from the verify costs measured

    @property
    def winner(self) -> CandidateResult | None:
        """The first result if it beats plain decoding: predicted, and measured where it was confirmed."""
        first = self.results[0] if self.results else None
        if first is None or first.speedup <= 1.0:
            return None
        return None if first.confirmation is not None and first.confirmation.speedup <= 1.0 else first

    def to_json(self) -> dict[str, object]:
        winner = self.winner
        return {
            "target": self.target,
            "budget_seconds": self.budget_seconds,
            "elapsed_seconds": round(self.elapsed_seconds, 2),
            "plain_tokens_per_second": round(self.plain_tokens_per_second, 2),
            "cancelled": self.cancelled,
            "winner": None if winner is None else winner.candidate.label,
            "candidates": [r.to_json() for r in self.results],
            "skipped": self.skipped,
            "backend": None if self.payoff is None else self.payoff.to_json(),
        }


class _Clock:
    """The budget: fractions spent, and a deadline for each phase that shares what is left by weight."""

    def __init__(self, budget: float, progress: Progress | None) -> None:
        self.started = time.perf_counter()
        self.end = self.started + budget
        self.budget = budget
        self.progress = progress

    def say(self, message: str) -> None:
        if self.progress is not None:
            spent = (time.perf_counter() - self.started) / self.budget if self.budget > 0 else 1.0
            self.progress(message, min(max(spent, 0.0), 1.0))

    def deadline(self, weight: float, weights_left: float) -> float:
        now = time.perf_counter()
        return now + max(self.end - now, 0.0) * weight / weights_left


def _rank(results: list[CandidateResult]) -> list[CandidateResult]:
    order = {CandidateKind.CATALOG: 1, CandidateKind.INCOMPATIBLE: 2}
    measured = sorted((r for r in results if r.prediction is not None), key=lambda r: -r.speedup)
    rest = sorted(
        (r for r in results if r.prediction is None), key=lambda r: (order.get(r.candidate.kind, 0), r.candidate.label)
    )
    return measured + rest


def _explain(results: list[CandidateResult]) -> None:
    measured = [r for r in results if r.prediction is not None]
    best = measured[0].prediction if measured and measured[0].speedup > 1.0 else None
    for r in measured:
        assert r.prediction is not None
        r.reason = losing_reason(r.prediction, best) if r.prediction is not best else "fastest here"
    for r in results:
        if r.prediction is None and not r.reason:
            r.reason = r.candidate.reason or "not measured"


def _remember(advice: Advice) -> None:
    rows = []
    for r in advice.results:
        c, p = r.candidate, r.prediction
        if p is None or c.drafter is None:
            continue
        rows.append(
            cache.CachedResult(
                advice.target,
                str.__str__(c.drafter),
                c.path,
                p.best_depth,
                round(p.speedup, 3),
                round(p.auto_speedup, 3),
                None if r.confirmation is None else round(r.confirmation.speedup, 3),
                round(p.acceptance, 4),
                time.time(),
            )
        )
    if rows:
        try:
            cache.store(rows)
        except OSError as exc:  # the advice stands; only keeping it for the picker failed
            log.warning("advisor results could not be kept in %s (%s)", cache.cache_path(), exc.strerror or exc)


def advise(
    target: str | Path,
    named: Sequence[str | Path] = (),
    *,
    budget_seconds: float = DEFAULT_BUDGET,
    cancel: CancelToken | None = None,
    progress: Progress | None = None,
    library: bool = True,
    lookup: bool = True,
    catalog: bool = True,
    max_depth: int = CALIBRATION_DEPTH,
    max_tokens: int = CALIBRATION_TOKENS,
    n_gpu_layers: GpuLayers = GPU_LAYERS_AUTO,
    remember: bool = True,
    loaded_draft: str | Path | None = None,
    composite: bool = False,
) -> Advice:
    """Find, measure and rank the drafters for ``target`` within ``budget_seconds``.

    ``loaded_draft`` (the draft loaded with the target in the window) is always a candidate, and
    ``composite`` adds the automatic drafter on it (or on the target's heads); see :func:`find_candidates`.

    Raises a one-line SpecchatError for a missing or corrupt target or named file, and when
    nothing can be measured. A cancelled run returns what it had, with ``cancelled`` set.
    """
    if not budget_seconds > 0:
        raise SpecchatError(f"the budget must be a positive number of seconds, got {budget_seconds}")
    cancel = cancel or CancelToken()
    if progress is not None and any(Path(p).expanduser().is_dir() for p in named):
        progress("searching the named folders for GGUF files", 0.0)
    found = find_candidates(
        target,
        named,
        library=library,
        lookup=lookup,
        catalog=catalog,
        cancel=cancel,
        loaded_draft=loaded_draft,
        composite=composite,
    )
    if cancel.cancelled:  # Ctrl-C while searching (``--candidates /``): nothing was measured
        return Advice(str(Path(target).expanduser()), [], budget_seconds, cancelled=True)
    clock = _Clock(budget_seconds, progress)  # the budget is for measuring: finding reads headers only
    advice = Advice(
        str(Path(target).expanduser()),
        [CandidateResult(c) for c in found.candidates],
        budget_seconds,
        skipped=found.skipped,
    )
    runnable = [r for r in advice.results if r.candidate.measurable]
    if not runnable:
        why = "; ".join(f"{r.candidate.label}: {r.candidate.reason}" for r in advice.results) or "none found"
        raise SpecchatError(f"no candidate drafter can run for {Path(target).name} ({why})")
    clock.say(f"{len(runnable)} candidates to measure; loading the target")
    _calibrate(advice, runnable, found.target.mtp_layers > 0, clock, cancel, max_depth, max_tokens, n_gpu_layers)
    advice.results = _rank(advice.results)
    _explain(advice.results)
    advice.cancelled = cancel.cancelled
    advice.elapsed_seconds = time.perf_counter() - clock.started
    if remember and not advice.cancelled:
        _remember(advice)
        if advice.payoff is not None:
            try:
                remember_payoff(advice.target, advice.payoff)
            except OSError as exc:
                log.warning("the backend verdict could not be kept (%s)", exc.strerror or exc)
    if progress is not None:
        progress("done", 1.0)
    return advice


class _DraftModels:
    """Draft files loaded for the calibration, each once: a draft and the automatic drafter on it share it."""

    def __init__(self, target: str, n_gpu_layers: GpuLayers) -> None:
        self.target, self.n_gpu_layers = target, n_gpu_layers
        self.models: dict[str, Model] = {}

    def get(self, path: str) -> Model:
        if path not in self.models:
            from specchat.core.llama.model import Model
            from specchat.core.models.placement import resolve_gpu_layers

            _, layers = resolve_gpu_layers(
                self.target, path, self.n_gpu_layers, self.n_gpu_layers, n_ctx=CALIBRATION_CONTEXT
            )
            self.models[path] = Model(path, n_gpu_layers=layers)
        return self.models[path]

    def close(self) -> None:
        for model in self.models.values():
            model.close()
        self.models.clear()


@contextlib.contextmanager
def _drafter(runtime: Runtime, candidate: Candidate, models: _DraftModels) -> Iterator[Drafter]:
    """The candidate's drafter on the loaded target; a draft file's context is made for the block and closed after.

    Each draft has its own context on its model; n-gram lookup, the MTP heads and the automatic drafter
    on them need only the target.
    """
    assert candidate.drafter is not None
    if candidate.kind is CandidateKind.HEAD:
        opener = HEAD_DRAFTERS.get(candidate.drafter)
        if opener is None:
            raise SpecchatError(unmeasurable_reason(candidate.head))
        with opener(runtime, candidate) as drafter:
            yield drafter
        return
    if not candidate.path:
        yield runtime.drafter_for(candidate.drafter)
        return
    from specchat.core.engine.registry import make_drafter
    from specchat.core.llama.context import Context

    context = Context(models.get(candidate.path), n_ctx=CALIBRATION_CONTEXT)
    try:
        yield make_drafter(candidate.drafter, context)
    finally:
        context.close()


def _load_target(advice: Advice, runnable: list[CandidateResult], with_mtp: bool, n_gpu_layers: GpuLayers) -> Runtime:
    from specchat.core.llama.model import Model
    from specchat.core.models.placement import resolve_gpu_layers
    from specchat.core.runtime.runtime import Runtime

    drafts = [r.candidate.path for r in runnable if r.candidate.path]
    biggest = max(drafts, key=lambda p: Path(p).stat().st_size) if drafts else None
    layers, _ = resolve_gpu_layers(advice.target, biggest, n_gpu_layers, n_gpu_layers, n_ctx=CALIBRATION_CONTEXT)
    return Runtime(Model(advice.target, n_gpu_layers=layers, load_mtp=with_mtp), None, n_ctx=CALIBRATION_CONTEXT)


def _calibrate(
    advice: Advice,
    runnable: list[CandidateResult],
    with_mtp: bool,
    clock: _Clock,
    cancel: CancelToken,
    max_depth: int,
    max_tokens: int,
    n_gpu_layers: GpuLayers,
) -> None:
    """Measure plain decoding and every candidate prompt by prompt, taking turns, then confirm the best.

    Taking turns (rather than one candidate after another) lets a shared machine's drifting speed
    touch every candidate and plain decoding alike; every draft file stays loaded meanwhile.
    """
    runtime = _load_target(advice, runnable, with_mtp, n_gpu_layers)
    try:
        with contextlib.ExitStack() as stack:
            models = _DraftModels(advice.target, n_gpu_layers)
            stack.callback(models.close)  # after every context on them is closed
            runs: list[tuple[CandidateResult | None, Drafter]] = [(None, runtime.drafter_for(DrafterKind.NONE))]
            for result in runnable:
                clock.say(f"loading {result.candidate.label}")
                try:
                    runs.append((result, stack.enter_context(_drafter(runtime, result.candidate, models))))
                except SpecchatError as exc:
                    result.reason = f"could not run: {exc}"
            plain, measured = _take_turns(runtime, runs, clock, cancel, max_depth, max_tokens)
            advice.plain_tokens_per_second = plain.tokens_per_second
            if not plain.rounds:  # cancelled before anything ran
                return
            every = [*plain.rounds, *(r for m in measured.values() for r in m.rounds)]
            costs = RoundCosts.fitted(every)
            scaling = verify_scaling(every)
            advice.payoff = payoff(scaling) if scaling is not None else None
            for ran, _ in runs[1:]:
                assert ran is not None
                m = measured[ran.candidate.key]
                if m.drafted_rounds < MIN_DRAFTED_ROUNDS:
                    ran.reason = f"not measured: the budget ran out after {m.drafted_rounds} rounds"
                else:
                    ran.prediction = predict(plain, m, depth_for(ran.candidate, max_depth), costs)
            _confirm_best(runtime, runs, clock, cancel, max_tokens)
    finally:
        runtime.close()


def depth_for(candidate: Candidate, max_depth: int) -> int:
    """The deepest depth to calibrate a candidate at: ``max_depth``, or a head's natural block if shorter."""
    return min(max_depth, candidate.natural_depth) if candidate.natural_depth > 0 else max_depth


def _prompts(runtime: Runtime) -> list[list[int]]:
    return [runtime.prompt([{"role": "user", "content": text}]).tokens for _, text in PROMPTS]


def _take_turns(
    runtime: Runtime,
    runs: list[tuple[CandidateResult | None, Drafter]],
    clock: _Clock,
    cancel: CancelToken,
    max_depth: int,
    max_tokens: int,
) -> tuple[Measurement, dict[str, Measurement]]:
    """Each prompt decoded plainly, then by each candidate; a run's share of the budget grows with what
    earlier runs left. Past its deadline a run stops at the next round (after one round on the first prompt;
    later prompts are skipped)."""
    prompts = _prompts(runtime)
    plain = Measurement()
    measured = {r.candidate.key: Measurement() for r, _ in runs if r is not None}
    weights_left = len(prompts) * (PLAIN_WEIGHT + CANDIDATE_WEIGHT * (len(runs) - 1)) + CONFIRM_WEIGHT
    for i, prompt in enumerate(prompts):
        for result, drafter in runs:
            weight = PLAIN_WEIGHT if result is None else CANDIDATE_WEIGHT
            deadline = clock.deadline(weight, weights_left)
            weights_left -= weight
            if cancel.cancelled:
                return plain, measured
            if i > 0 and time.perf_counter() >= deadline:
                continue
            label = "plain decoding" if result is None else result.candidate.label
            clock.say(f"{label}: {PROMPTS[i][0]} prompt")
            into = plain if result is None else measured[result.candidate.key]
            depth = 0 if result is None else depth_for(result.candidate, max_depth)
            run_prompt(
                runtime.target_side,
                drafter,
                prompt,
                max_depth=depth,
                max_tokens=max_tokens,
                deadline=deadline,
                cancel=cancel,
                into=into,
            )
    return plain, measured


def _confirm_best(
    runtime: Runtime,
    runs: list[tuple[CandidateResult | None, Drafter]],
    clock: _Clock,
    cancel: CancelToken,
    max_tokens: int,
) -> None:
    """The best predicted candidate against plain decoding, interleaved, with what is left of the budget."""
    scored: list[tuple[CandidateResult, Drafter]] = [
        (r, d) for r, d in runs if r is not None and r.prediction is not None
    ]
    if not scored or cancel.cancelled:
        return
    best, drafter = max(scored, key=lambda rd: rd[0].speedup)
    if best.prediction is None or best.speedup <= 1.0:
        return
    depth = best.prediction.best_depth
    label = best.candidate.label
    clock.say(f"confirming {label} at depth {depth} against plain decoding")
    best.confirmation = confirm(
        runtime.target_side,
        runs[0][1],
        drafter,
        _prompts(runtime),
        depth,
        max_tokens=max_tokens,
        deadline=clock.deadline(CONFIRM_WEIGHT, CONFIRM_WEIGHT),
        cancel=cancel,
        on_prompt=lambda i: clock.say(f"confirming {label}: {PROMPTS[i][0]} prompt"),
    )
