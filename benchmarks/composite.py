"""The composite drafter against n-gram lookup alone and the draft model alone, on the demo pair.

For every prompt, in turn and back to back in one process: plain decoding,
lookup alone, the draft model alone, the composite (all greedy, auto depth).
Prints each drafter's speed-up over the plain run just before it, per prompt
and overall (token-weighted: total tokens over total seconds), the
composite's share of the better single drafter, how often each kind of round
won the composite's per-round choice, and the issue's goals met or not.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/composite.py [--prompts FILE ...] [--max-tokens N]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specchat.cli.bench import RunFigures, load_prompts, run_once
from specchat.core.chat.session import ChatEngine
from specchat.core.models.demo import provision_demo_pair
from specchat.core.types import DrafterKind, GenerationParams

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "prompts"
DEFAULT_PROMPTS = [SHARED / "mixed-public.jsonl", SHARED / "public.jsonl"]
DRAFTERS = {"lookup": DrafterKind.NGRAM, "model": DrafterKind.DRAFT_MODEL, "composite": DrafterKind.COMPOSITE}
OPEN_CHAT = {"m-open", "explain-bicycle", "story", "email", "multi-turn"}  # replies that copy little


@dataclass
class Row:
    """One prompt's runs."""

    id: str
    plain: RunFigures
    runs: dict[str, RunFigures]
    identical: bool

    def speedup(self, name: str) -> float:
        return self.runs[name].tokens_per_s / self.plain.tokens_per_s if self.plain.tokens_per_s else 0.0


@dataclass
class Totals:
    tokens: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, run: RunFigures) -> None:
        self.tokens[name] = self.tokens.get(name, 0) + run.generated
        self.seconds[name] = self.seconds.get(name, 0.0) + run.seconds

    def rate(self, name: str) -> float:
        return self.tokens[name] / self.seconds[name] if self.seconds.get(name) else 0.0


def run_file(engine: ChatEngine, path: Path, params: GenerationParams) -> list[Row]:
    rows = []
    for pid, messages in load_prompts(path, None):
        plain, _ = run_once(engine, messages, params, DrafterKind.NONE, 0)
        runs = {name: run_once(engine, messages, params, kind, None)[0] for name, kind in DRAFTERS.items()}
        identical = all(r.tokens == plain.tokens for r in runs.values())
        rows.append(Row(pid, plain, runs, identical))
        print(f"  {path.name} {pid}: " + ", ".join(f"{n} {rows[-1].speedup(n):.2f}x" for n in DRAFTERS),
              file=sys.stderr)
    return rows


def table(title: str, rows: list[Row]) -> tuple[str, dict[str, bool]]:
    """The printed table for one prompt file, and the goals it meets."""
    head = (f"{'prompt':<18}{'tokens':>7}{'plain':>8}{'lookup':>8}{'model':>8}{'compos.':>8}{'/best':>7}"
            f"{'ident':>6}  rounds won (lookup/model/splice/plain)")
    lines = [title, head, "-" * len(head)]
    totals = Totals()
    per_prompt_ok = True
    wins_total: dict[str, int] = {}
    open_ok = True
    for r in rows:
        totals.add("plain", r.plain)
        for name, run in r.runs.items():
            totals.add(name, run)
        best = max(r.speedup("lookup"), r.speedup("model"))
        share = r.speedup("composite") / best if best else 0.0
        per_prompt_ok &= share >= 0.95
        if r.id in OPEN_CHAT:
            open_ok &= r.speedup("composite") >= 0.97 * r.speedup("model")
        kinds = r.runs["composite"].figures.round_kinds
        for kind, n in kinds.items():
            wins_total[kind] = wins_total.get(kind, 0) + n
        won = "/".join(str(kinds.get(k, 0)) for k in ("lookup", "model", "splice", "plain"))
        lines.append(f"{r.id[:17]:<18}{r.plain.generated:>7}{r.plain.tokens_per_s:>8.1f}"
                     f"{r.speedup('lookup'):>7.2f}x{r.speedup('model'):>7.2f}x{r.speedup('composite'):>7.2f}x"
                     f"{share:>7.0%}{'yes' if r.identical else 'NO':>6}  {won}")
    plain = totals.rate("plain")
    overall = {n: totals.rate(n) / plain if plain else 0.0 for n in DRAFTERS}
    best_overall = max(overall["lookup"], overall["model"])
    lines.append(f"{'OVERALL':<18}{totals.tokens['plain']:>7}{plain:>8.1f}{overall['lookup']:>7.2f}x"
                 f"{overall['model']:>7.2f}x{overall['composite']:>7.2f}x"
                 f"{overall['composite'] / best_overall if best_overall else 0.0:>7.0%}"
                 f"{'yes' if all(r.identical for r in rows) else 'NO':>6}  "
                 + "/".join(str(wins_total.get(k, 0)) for k in ("lookup", "model", "splice", "plain")))
    return "\n".join(lines), {"every prompt >= 95% of the better single drafter": per_prompt_ok,
                              "open chat within 3% of the draft model": open_ok,
                              "overall >= 2.0x plain": overall["composite"] >= 2.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, nargs="+", default=DEFAULT_PROMPTS)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    pair = provision_demo_pair()
    engine = ChatEngine.load(pair.target, pair.draft, n_ctx=4096, n_threads=args.threads)
    params = GenerationParams(max_tokens=args.max_tokens)
    warm = GenerationParams(max_tokens=16)
    for kind in (DrafterKind.NONE, *DRAFTERS.values()):  # each drafter's controller measures its costs once
        run_once(engine, [{"role": "user", "content": "Say hello."}], warm, kind, None)
    out = []
    for path in args.prompts:
        text, goals = table(f"{path.name} (greedy, auto depth, {args.max_tokens} tokens; speed-ups over plain)",
                            run_file(engine, path, params))
        out.append(text)
        for goal, met in goals.items():
            if path.name.startswith("mixed") or goal != "overall >= 2.0x plain":
                out.append(f"  goal: {goal}: {'met' if met else 'NOT met'}")
        out.append("")
    print("\n".join(out))
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
