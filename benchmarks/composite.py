"""The composite drafter against n-gram lookup alone and the draft model alone, on the demo pair.

For every prompt, in turn and back to back in one process: plain decoding,
lookup alone, the draft model alone, the composite (all greedy, auto depth).
Prints each drafter's speed-up over the plain run just before it, per prompt
and overall (token-weighted: total tokens over total seconds), the
composite's share of the better single drafter, how often each kind of round
won the composite's per-round choice, and the issue's goals met or not.
"ident" says whether every run wrote plain decoding's text: yes; tieN when N
runs parted from it only at a float tie (the target's two best tokens within
float noise, told as the identity tests tell it); NO for a real divergence.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/composite.py [--prompts FILE ...] [--max-tokens N] [--repeat N]
        [--min-tokens N]   # benchmarks/prompts/open-chat.jsonl: eight more open questions
    python benchmarks/composite.py --priors   # the lookup priors, measured over plain replies
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specchat.cli.bench import RunFigures, load_prompts, run_once
from specchat.core.engine.composite import MATCH_KEYS, MAX_NGRAM, CompositeDrafter, match_key
from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, GenerationParams

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # for the tie test the identity tests use (support/identity.py)
SHARED = ROOT.parent / "shared" / "prompts"
DEFAULT_PROMPTS = [SHARED / "mixed-public.jsonl", SHARED / "public.jsonl"]
DRAFTERS = {"lookup": DrafterKind.NGRAM, "model": DrafterKind.DRAFT_MODEL, "composite": DrafterKind.COMPOSITE}
OPEN_CHAT = {"m-open", "explain-bicycle", "story", "email", "multi-turn"}  # replies that copy little
OPEN_CHAT_PREFIX = "o-"  # benchmarks/prompts/open-chat.jsonl: more open questions, for a figure less tied to one reply
MAX_RUNS = 16


def is_open_chat(pid: str) -> bool:
    """Whether the prompt ``pid`` asks for new text (copies little from the conversation)."""
    return pid in OPEN_CHAT or pid.startswith(OPEN_CHAT_PREFIX)


@dataclass
class Runs:
    """One drafter's runs of one prompt, summed over the repeats."""

    generated: int = 0
    seconds: float = 0.0
    round_kinds: dict[str, int] = field(default_factory=dict)

    def add(self, run: RunFigures) -> None:
        self.generated += run.generated
        self.seconds += run.seconds
        for kind, n in run.figures.round_kinds.items():
            self.round_kinds[kind] = self.round_kinds.get(kind, 0) + n

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds if self.seconds else 0.0


@dataclass
class Row:
    """One prompt's runs."""

    id: str
    plain: Runs
    runs: dict[str, Runs]
    identical: bool
    ties: int = 0  # runs that left plain decoding's text at a float tie (counted apart from identical)

    @property
    def identity(self) -> str:
        return "NO" if not self.identical else f"tie{self.ties}" if self.ties else "yes"

    def speedup(self, name: str) -> float:
        return self.runs[name].tokens_per_s / self.plain.tokens_per_s if self.plain.tokens_per_s else 0.0


@dataclass
class Totals:
    tokens: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, run: Runs) -> None:
        self.tokens[name] = self.tokens.get(name, 0) + run.generated
        self.seconds[name] = self.seconds.get(name, 0.0) + run.seconds

    def rate(self, name: str) -> float:
        return self.tokens[name] / self.seconds[name] if self.seconds.get(name) else 0.0


def run_file(runtime: Runtime, path: Path, params: GenerationParams, repeat: int, min_tokens: int = 0) -> list[Row]:
    """Each prompt ``repeat`` times in turn: plain, then each drafter, back to back.

    A prompt whose replies are short runs again until plain decoding has written
    ``min_tokens`` (at most :data:`MAX_RUNS` runs): an 8-token reply is two rounds,
    and one run's timings say little about a 5% margin.
    """
    from support.identity import compare_greedy

    rows = []
    for pid, messages in load_prompts(path, None):
        plain, runs = Runs(), {name: Runs() for name in DRAFTERS}
        identical, ties = True, 0
        runs_done = 0
        while runs_done < repeat or (plain.generated < min_tokens and runs_done < MAX_RUNS):
            runs_done += 1
            base = run_once(runtime, messages, params, DrafterKind.NONE, 0)
            plain.add(base)
            for name, kind in DRAFTERS.items():
                run = run_once(runtime, messages, params, kind, None)
                runs[name].add(run)
                if run.tokens != base.tokens:
                    # Batched and one-token kernels round differently: a near-tie can flip (tests/support/identity.py).
                    prompt = runtime.prompt(messages).tokens
                    parted = compare_greedy(runtime.target_context, prompt, base.tokens, run.tokens, params.sampler)
                    print(f"  {pid} {name}: {parted.describe()}", file=sys.stderr)
                    ties += parted.tie
                    identical &= parted.tie
        rows.append(Row(pid, plain, runs, identical, ties))
        print(
            f"  {path.name} {pid}: " + ", ".join(f"{n} {rows[-1].speedup(n):.2f}x" for n in DRAFTERS), file=sys.stderr
        )
    return rows


def table(title: str, rows: list[Row]) -> tuple[str, dict[str, bool]]:
    """The printed table for one prompt file, and the goals it meets."""
    head = (
        f"{'prompt':<18}{'tokens':>7}{'plain':>8}{'lookup':>8}{'model':>8}{'compos.':>8}{'/best':>7}"
        f"{'ident':>6}  rounds won (lookup/model/splice/plain)"
    )
    lines = [title, head, "-" * len(head)]
    totals = Totals()
    per_prompt_ok = True
    wins_total: dict[str, int] = {}
    open_chat = Totals()  # the replies that copy little, together
    for r in rows:
        totals.add("plain", r.plain)
        for name, run in r.runs.items():
            totals.add(name, run)
            if is_open_chat(r.id):
                open_chat.add(name, run)
        if is_open_chat(r.id):
            open_chat.add("plain", r.plain)
        best = max(r.speedup("lookup"), r.speedup("model"))
        share = r.speedup("composite") / best if best else 0.0
        per_prompt_ok &= share >= 0.95
        kinds = r.runs["composite"].round_kinds
        for kind, n in kinds.items():
            wins_total[kind] = wins_total.get(kind, 0) + n
        won = "/".join(str(kinds.get(k, 0)) for k in ("lookup", "model", "splice", "plain"))
        lines.append(
            f"{r.id[:17]:<18}{r.plain.generated:>7}{r.plain.tokens_per_s:>8.1f}"
            f"{r.speedup('lookup'):>7.2f}x{r.speedup('model'):>7.2f}x{r.speedup('composite'):>7.2f}x"
            f"{share:>7.0%}{r.identity:>6}  {won}"
        )
    plain = totals.rate("plain")
    overall = {n: totals.rate(n) / plain if plain else 0.0 for n in DRAFTERS}
    best_overall = max(overall["lookup"], overall["model"])
    lines.append(
        f"{'OVERALL':<18}{totals.tokens['plain']:>7}{plain:>8.1f}{overall['lookup']:>7.2f}x"
        f"{overall['model']:>7.2f}x{overall['composite']:>7.2f}x"
        f"{overall['composite'] / best_overall if best_overall else 0.0:>7.0%}"
        f"{'yes' if all(r.identical for r in rows) else 'NO':>6}  "
        + "/".join(str(wins_total.get(k, 0)) for k in ("lookup", "model", "splice", "plain"))
    )
    open_ok = True
    if open_chat.seconds:
        open_plain = open_chat.rate("plain")
        model, composite = open_chat.rate("model") / open_plain, open_chat.rate("composite") / open_plain
        open_ok = composite >= 0.97 * model
        lines.append(
            f"{'open chat':<18}{open_chat.tokens['plain']:>7}{open_plain:>8.1f}"
            f"{open_chat.rate('lookup') / open_plain:>7.2f}x{model:>7.2f}x{composite:>7.2f}x"
            f"   ({', '.join(sorted(r.id for r in rows if is_open_chat(r.id)))}: together)"
        )
    return "\n".join(lines), {
        "every prompt >= 95% of the better single drafter": per_prompt_ok,
        "open chat (together) within 3% of the draft model": open_ok,
        "overall >= 2.0x plain": overall["composite"] >= 2.0,
    }


def measure_priors(runtime: Runtime, paths: list[Path], params: GenerationParams) -> str:
    """Lookup acceptance by match key and position, over plain greedy replies to the prompts in ``paths``.

    At every reply position, each lookup candidate there (as the composite finds them, over the
    prompt and the reply so far) is scored against what the target wrote next: position 0 counts
    every candidate, position i the ones whose first i tokens were right.
    """
    counts: dict[tuple[int, int], list[int]] = {}  # (key, position) -> [hits, tries]
    drafter = CompositeDrafter.__new__(CompositeDrafter)
    drafter.max_ngram, drafter.memory = MAX_NGRAM, None
    for path in paths:
        for _, messages in load_prompts(path, None):
            run = run_once(runtime, messages, params, DrafterKind.NONE, 0)
            prompt = runtime.prompt(messages).tokens
            seq = prompt + run.tokens
            for at in range(len(prompt), len(seq) - 1):
                for length, proposal, _origin in drafter.lookups(seq[:at], 16):  # origin: always "" (no texts)
                    key = match_key(length)
                    for i, token in enumerate(proposal[: len(seq) - at]):
                        cell = counts.setdefault((key, min(i, 1)), [0, 0])
                        cell[1] += 1
                        if token != seq[at + i]:
                            break
                        cell[0] += 1
    lines = ["match key   first token (hits/tries)   each later one, given those before (hits/tries)"]
    for key in MATCH_KEYS:
        first, later = counts.get((key, 0), [0, 0]), counts.get((key, 1), [0, 0])
        lines.append(
            f"{key:>9}   {first[0] / max(first[1], 1):>6.2f} ({first[0]}/{first[1]})"
            f"{later[0] / max(later[1], 1):>18.2f} ({later[0]}/{later[1]})"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, nargs="+", default=DEFAULT_PROMPTS)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each prompt per drafter (summed)")
    parser.add_argument(
        "--min-tokens",
        type=int,
        default=0,
        help=f"run a prompt again until plain decoding wrote this many tokens (at most {MAX_RUNS})",
    )
    parser.add_argument(
        "--priors",
        action="store_true",
        help="print lookup acceptance by match length over plain replies (the composite's priors)",
    )
    args = parser.parse_args()
    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, pair.draft, n_ctx=4096, n_threads=args.threads)
    params = GenerationParams(max_tokens=args.max_tokens)
    if args.priors:
        print(measure_priors(runtime, args.prompts, params))
        runtime.close()
        return 0
    # Each drafter's controller measures its costs once, over rounds of several depths: a reply that
    # both writes and copies (16 tokens of "Say hello." left the verify-cost line a guess).
    warm = GenerationParams(max_tokens=48)
    warm_prompt = [{"role": "user", "content": "Say hello, then repeat: the quick brown fox jumps over the lazy dog."}]
    for kind in (DrafterKind.NONE, *DRAFTERS.values()):  # each drafter's controller measures its costs once
        run_once(runtime, warm_prompt, warm, kind, None)
    out = []
    for path in args.prompts:
        text, goals = table(
            f"{path.name} (greedy, auto depth, {args.max_tokens} tokens, {args.repeat} run(s) each; "
            "speed-ups over plain)",
            run_file(runtime, path, params, args.repeat, args.min_tokens),
        )
        out.append(text)
        for goal, met in goals.items():
            if path.name.startswith("mixed") or goal != "overall >= 2.0x plain":
                out.append(f"  goal: {goal}: {'met' if met else 'NOT met'}")
        out.append("")
    print("\n".join(out))
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
