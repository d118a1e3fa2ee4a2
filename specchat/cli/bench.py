"""``specchat bench``: plain target decoding vs speculation over a prompt file, interleaved.

Each reply is folded with :class:`~specchat.core.chat.transcript.ReplyFigures`, as the window folds it; the
overall figures add the replies' engine counters up with :func:`~specchat.core.chat.transcript.combined`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.cli.chat import add_model_arguments, drafter_from_args, load_runtime, params_from_args
from specchat.cli.sources import FileSources, OriginCounts, add_source_arguments, sources_from_args
from specchat.core.chat.transcript import ReplyFigures, combined
from specchat.core.types import MAX_DEPTH, DrafterKind, GenerationParams, GenerationStats, SpecchatError, parse_depth

if TYPE_CHECKING:
    from specchat.core.runtime.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("bench", help="benchmark plain vs speculative decoding over a prompt file")
    add_model_arguments(parser, draft_required=True)
    parser.add_argument("--prompts", type=Path, required=True, help="JSONL: one {id, messages} per line")
    parser.add_argument("--depth", nargs="+", default=["auto"], help=f"depths to try: 0-{MAX_DEPTH} or auto")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_source_arguments(parser)  # every prompt's last message gets the attached files; every reply the sources
    parser.set_defaults(func=cmd_bench, max_tokens=128)


@dataclass
class RunFigures:
    """One decoded prompt: its tokens and the figures folded from its events (as the window counts them)."""

    tokens: list[int]
    figures: ReplyFigures
    by_text: dict[str, dict[str, int]] = field(default_factory=dict)  # drafted/accepted per attached text

    @property
    def stats(self) -> GenerationStats:
        """The engine's counters for the reply (what the window stores with it)."""
        return self.figures.final or GenerationStats()

    @property
    def generated(self) -> int:
        return self.figures.generated

    @property
    def seconds(self) -> float:
        return self.stats.generate_seconds

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds if self.seconds else 0.0


@dataclass
class PromptResult:
    """One prompt at one depth. The counters' rates and ``by_source`` are the speculative reply's
    :class:`~specchat.core.types.ReplyCounts` (``rates_dict``, ``source_dict``), as the window stores them."""

    id: str
    depth: str
    baseline_tokens_per_s: float
    native_tokens_per_s: float
    speculative_tokens_per_s: float
    speedup: float
    acceptance_rate: float
    mean_accepted_per_round: float
    predicted_tokens_per_s: float
    identical: bool | None
    tokens: int
    # Per draft source: drafted and accepted tokens; and the verify passes by what drafted them.
    by_source: dict[str, dict[str, int]] = field(default_factory=dict)
    round_kinds: dict[str, int] = field(default_factory=dict)
    # Per text given with --attach or --prediction: its drafted and accepted tokens.
    by_text: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class BenchReport:
    """One depth over all prompts: rates of the summed replies (the rates and ``by_source`` derived from
    :class:`~specchat.core.types.ReplyCounts` as :class:`PromptResult`'s are), and each prompt's result."""

    depth: str
    baseline_tokens_per_s: float = 0.0
    native_tokens_per_s: float = 0.0
    speculative_tokens_per_s: float = 0.0
    speedup: float = 0.0
    speedup_vs_native: float = 0.0
    plain_vs_native: float = 0.0
    acceptance_rate: float = 0.0
    mean_accepted_per_round: float = 0.0
    predicted_tokens_per_s: float = 0.0
    fraction_of_predicted: float = 0.0
    identical: bool | None = None
    by_source: dict[str, dict[str, int]] = field(default_factory=dict)
    round_kinds: dict[str, int] = field(default_factory=dict)
    per_prompt: list[PromptResult] = field(default_factory=list)


@dataclass
class Totals:
    """Sums over a depth's prompts: each side's replies added up as one reply's figures (the engine's
    ``GenerationStats``, summed as a continuation is); rates are ratios of sums, so long replies weigh more."""

    base: GenerationStats = field(default_factory=GenerationStats)
    spec: GenerationStats = field(default_factory=GenerationStats)
    native_tokens: int = 0
    native_seconds: float = 0.0
    predicted_seconds: float = 0.0  # what the spec tokens would take at each prompt's predicted rate

    def add(
        self, base: RunFigures, spec: RunFigures, native_tokens: int, native_seconds: float, predicted_rate: float
    ) -> None:
        self.base = combined(self.base, base.stats)
        self.spec = combined(self.spec, spec.stats)
        self.native_tokens += native_tokens
        self.native_seconds += native_seconds
        self.predicted_seconds += spec.generated / predicted_rate if predicted_rate else 0.0

    def fill(self, report: BenchReport) -> None:
        """Write the overall figures into ``report``."""
        base, spec = self.base, self.spec
        report.baseline_tokens_per_s = _ratio(base.generated, base.generate_seconds, 2)
        report.native_tokens_per_s = _ratio(self.native_tokens, self.native_seconds, 2)
        report.speculative_tokens_per_s = _ratio(spec.generated, spec.generate_seconds, 2)
        report.speedup = _ratio(report.speculative_tokens_per_s, report.baseline_tokens_per_s, 3)
        report.speedup_vs_native = _ratio(report.speculative_tokens_per_s, report.native_tokens_per_s, 3)
        report.plain_vs_native = _ratio(report.baseline_tokens_per_s, report.native_tokens_per_s, 3)
        rates = spec.rates_dict()
        report.acceptance_rate = rates["acceptance_rate"]
        report.mean_accepted_per_round = rates["mean_accepted_per_round"]
        report.predicted_tokens_per_s = _ratio(spec.generated, self.predicted_seconds, 2)
        report.fraction_of_predicted = _ratio(report.speculative_tokens_per_s, report.predicted_tokens_per_s, 3)


def _ratio(numerator: float, denominator: float, digits: int) -> float:
    """``numerator / denominator`` rounded, or 0.0 when there is nothing to divide by."""
    return round(numerator / denominator, digits) if denominator else 0.0


def load_prompts(path: Path, limit: int | None) -> list[tuple[str, list[dict[str, str]]]]:
    from specchat.core.runtime.template import validate_messages

    if not path.is_file():
        raise SpecchatError(f"prompts file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecchatError(f"cannot read prompts file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SpecchatError(f"prompts file is not UTF-8 text: {path}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            out.append((str(obj.get("id", n)), list(obj["messages"])))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise SpecchatError(f'{path}:{n}: expected {{"id": ..., "messages": [...]}}') from None
        try:
            validate_messages(out[-1][1])
        except SpecchatError as exc:
            raise SpecchatError(f"{path}:{n}: {exc}") from None
        if out[-1][1][-1]["role"] != "user":
            raise SpecchatError(f"{path}:{n}: the last message must be from the user")
    if not out:
        raise SpecchatError(f"no prompts in {path}")
    return out[:limit] if limit else out


def run_once(
    runtime: Runtime,
    messages: list[dict[str, str]],
    params: GenerationParams,
    drafter: str,
    depth: int | None,
    files: FileSources | None = None,
) -> RunFigures:
    from specchat.core.engine.depth import DepthControl
    from specchat.core.runtime.conversation import Conversation

    files = files or FileSources()
    session = Conversation(runtime, messages[:-1])
    figures = ReplyFigures()
    origins = OriginCounts()
    figures.fold(
        origins.watch(
            session.reply(
                files.message(messages[-1]["content"]),
                params,
                drafter=drafter,
                depth=DepthControl(depth),
                sources=files.sources,
            )
        )
    )
    if figures.final is None:
        raise SpecchatError(figures.final_message or "the reply ended without figures")
    if figures.final_message:
        raise SpecchatError(figures.final_message)
    return RunFigures(session.last_tokens, figures, origins.as_dict())


def bench(
    runtime: Runtime,
    prompts: list[tuple[str, list[dict[str, str]]]],
    params: GenerationParams,
    drafter: str,
    depths: list[int | None],
    progress: bool = False,
    files: FileSources | None = None,
) -> list[BenchReport]:
    """For each prompt, each depth in turn: the prompt decoded plainly, then speculatively, back to back.

    Depths take turns prompt by prompt rather than running one after another, so
    a shared machine's drifting speed touches every depth alike, and each
    speedup is measured against plain decoding run just before it.
    """
    reports = [BenchReport(depth="auto" if depth is None else str(depth)) for depth in depths]
    totals = [Totals() for _ in depths]
    identical_all: list[bool | None] = [True if params.sampler.greedy else None for _ in depths]
    for pid, messages in prompts:
        for i, depth in enumerate(depths):
            report = reports[i]
            ctx = runtime.target_context
            ctx.perf_reset()
            base = run_once(runtime, messages, params, DrafterKind.NONE, 0, files)
            perf = ctx.perf()
            spec = run_once(runtime, messages, params, drafter, depth, files)
            adaptive = runtime.adaptive_for(drafter)
            predicted = adaptive.predicted_best_rate() if depth is None else adaptive.predicted_rate(depth)
            identical = base.tokens == spec.tokens if params.sampler.greedy else None
            if identical is False:
                identical_all[i] = False
            native = perf.eval_tokens / (perf.eval_ms / 1000) if perf.eval_ms else 0.0
            rates = spec.figures.rates_dict()
            report.per_prompt.append(
                PromptResult(
                    id=pid,
                    depth=report.depth,
                    baseline_tokens_per_s=round(base.tokens_per_s, 2),
                    native_tokens_per_s=round(native, 2),
                    speculative_tokens_per_s=round(spec.tokens_per_s, 2),
                    speedup=_ratio(spec.tokens_per_s, base.tokens_per_s, 3),
                    acceptance_rate=rates["acceptance_rate"],
                    mean_accepted_per_round=rates["mean_accepted_per_round"],
                    predicted_tokens_per_s=round(predicted, 2),
                    identical=identical,
                    tokens=spec.generated,
                    by_source=spec.figures.source_dict(),
                    round_kinds=dict(spec.figures.round_kinds),
                    by_text=spec.by_text,
                )
            )
            _add_counts(report, report.per_prompt[-1])
            totals[i].add(base, spec, perf.eval_tokens, perf.eval_ms / 1000, predicted)
            if progress:
                p = report.per_prompt[-1]
                print(
                    f"  {pid}: depth {p.depth} {p.speculative_tokens_per_s} vs {p.baseline_tokens_per_s} tok/s",
                    file=sys.stderr,
                )
    for report, tot, identical in zip(reports, totals, identical_all, strict=True):
        tot.fill(report)
        report.identical = identical
    return reports


def _add_counts(report: BenchReport, result: PromptResult) -> None:
    for name, counts in result.by_source.items():
        total = report.by_source.setdefault(name, {"drafted": 0, "accepted": 0})
        total["drafted"] += counts["drafted"]
        total["accepted"] += counts["accepted"]
    for kind, n in result.round_kinds.items():
        report.round_kinds[kind] = report.round_kinds.get(kind, 0) + n


def cmd_bench(args: argparse.Namespace) -> int:
    depths = [parse_depth(d) for d in args.depth]
    params = params_from_args(args)
    drafter = drafter_from_args(args)
    prompts = load_prompts(args.prompts, args.limit)
    files = sources_from_args(args)
    runtime = load_runtime(args)
    reports = bench(runtime, prompts, params, drafter, depths, progress=not args.json, files=files)
    if args.json:
        if len(reports) == 1:
            print(json.dumps(asdict(reports[0])))
        else:
            print(json.dumps({"runs": [asdict(r) for r in reports]}))
    else:
        print(format_table(reports))
    return 0


def format_table(reports: list[BenchReport]) -> str:
    head = (
        f"{'prompt':<16}{'depth':>6}{'plain':>9}{'native':>9}{'spec':>9}{'speedup':>9}"
        f"{'accept':>8}{'acc/rnd':>8}{'ident':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in reports:
        for p in r.per_prompt:
            lines.append(
                f"{p.id[:15]:<16}{p.depth:>6}{p.baseline_tokens_per_s:>9.1f}{p.native_tokens_per_s:>9.1f}"
                f"{p.speculative_tokens_per_s:>9.1f}{p.speedup:>8.2f}x{p.acceptance_rate:>8.0%}"
                f"{p.mean_accepted_per_round:>8.2f}{_yn(p.identical):>7}"
            )
        lines.append(
            f"{'OVERALL':<16}{r.depth:>6}{r.baseline_tokens_per_s:>9.1f}{r.native_tokens_per_s:>9.1f}"
            f"{r.speculative_tokens_per_s:>9.1f}{r.speedup:>8.2f}x{r.acceptance_rate:>8.0%}"
            f"{r.mean_accepted_per_round:>8.2f}{_yn(r.identical):>7}"
        )
        lines.append(
            f"  vs native decode rate: speculative {r.speedup_vs_native:.2f}x, plain {r.plain_vs_native:.1%}; "
            f"predicted ceiling {r.predicted_tokens_per_s:.1f} tok/s, reached {r.fraction_of_predicted:.0%}"
        )
        if r.by_source:
            sources = ", ".join(f"{name} {c['accepted']}/{c['drafted']}" for name, c in r.by_source.items())
            kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(r.round_kinds.items()))
            lines.append(f"  accepted/drafted by source: {sources}; verify passes: {kinds}")
        texts: dict[str, list[int]] = {}
        for p in r.per_prompt:
            for name, c in p.by_text.items():
                counts = texts.setdefault(name, [0, 0])
                counts[0] += c["accepted"]
                counts[1] += c["drafted"]
        if texts:
            lines.append("  drafted from: " + ", ".join(f"{name} {a}/{d}" for name, (a, d) in sorted(texts.items())))
        lines.append("")
    return "\n".join(lines)


def _yn(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")
