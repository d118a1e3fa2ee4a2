"""``specchat models advise TARGET``: which drafter to use with a target, measured on this machine.

Progress goes to standard error, the ranked table (or ``--json``: one object)
to standard output. Ctrl-C stops at the next round and exits 130.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.core.types import SpecchatError

if TYPE_CHECKING:
    from specchat.core.advise.advisor import Advice

EXIT_CANCELLED = 130


def add_parser(msub: argparse._SubParsersAction[Any]) -> None:
    """Register ``advise`` under ``specchat models``."""
    from specchat.core.advise import DEFAULT_BUDGET

    p = msub.add_parser("advise", help="find and measure the best drafter for TARGET on this machine")
    p.add_argument("target", help="the target model (.gguf)")
    p.add_argument(
        "--candidates",
        nargs="+",
        default=[],
        metavar="PATH",
        help="also judge these draft files (folders are searched)",
    )
    p.add_argument(
        "--budget-seconds",
        type=float,
        default=DEFAULT_BUDGET,
        metavar="N",
        help=f"time to spend measuring (default {DEFAULT_BUDGET:g})",
    )
    p.add_argument("--no-library", action="store_true", help="judge only --candidates, not the local library")
    p.add_argument("--no-lookup", action="store_true", help="leave n-gram lookup out")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_advise)


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n else "-"


def format_table(advice: Advice) -> str:
    """The ranked candidates, one line each, then a line on the winner."""
    head = (
        f"{'#':>2}  {'candidate':<34}{'kind':<13}{'accept':>7}{'cost':>6}{'depth':>6}{'predicted':>10}"
        f"{'auto':>7}{'measured':>9}{'memory':>10}  why"
    )
    lines = [head, "-" * len(head)]
    for i, r in enumerate(advice.results, 1):
        c, p, m = r.candidate, r.prediction, r.confirmation
        label = c.label if len(c.label) <= 33 else c.label[:32] + "…"
        lines.append(
            f"{i:>2}  {label:<34}{c.kind.value:<13}{_percent(p.acceptance if p else None):>7}"
            f"{_percent(p.cost_ratio if p else None):>6}"
            f"{(str(p.best_depth) if p else '-'):>6}{(f'{p.speedup:.2f}x' if p else '-'):>10}"
            f"{(f'{p.auto_speedup:.2f}x' if p else '-'):>7}{(f'{m.speedup:.2f}x' if m else '-'):>9}"
            f"{_gb(c.memory_bytes):>10}  {r.reason}"
        )
    winner = advice.winner
    if advice.cancelled:
        lines.append("cancelled: the figures above are what was measured before")
    elif not any(r.prediction for r in advice.results):
        lines.append("nothing could be measured in the budget: give it more seconds (--budget-seconds)")
    elif winner is None:
        lines.append("none of the candidates beats plain decoding here")
    else:
        p = winner.prediction
        assert p is not None
        measured = f", measured {winner.confirmation.speedup:.2f}x" if winner.confirmation else ""
        lines.append(
            f"use {winner.candidate.label} at depth {p.best_depth}: predicted {p.speedup:.2f}x{measured} "
            f"over plain decoding ({advice.plain_tokens_per_second:.1f} tok/s)"
        )
    return "\n".join(lines)


def cmd_advise(args: argparse.Namespace) -> int:
    from specchat.cli.chat import cancel_on_sigint
    from specchat.core.advise.advisor import advise
    from specchat.core.cancel import CancelToken

    if not 0 < args.budget_seconds < float("inf"):
        raise SpecchatError(f"--budget-seconds must be a positive number, got {args.budget_seconds}")
    cancel = CancelToken()
    cancel_on_sigint(cancel)

    def progress(message: str, fraction: float) -> None:
        print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    advice = advise(
        Path(args.target),
        [Path(p) for p in args.candidates],
        budget_seconds=args.budget_seconds,
        cancel=cancel,
        progress=progress,
        library=not args.no_library,
        lookup=not args.no_lookup,
    )
    if advice.cancelled:
        print("specchat: advise cancelled", file=sys.stderr)
        return EXIT_CANCELLED
    print(json.dumps(advice.to_json()) if args.json else format_table(advice))
    return 0
