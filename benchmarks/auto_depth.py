"""Auto depth against fixed depths on the demo pair, interleaved prompt by prompt.

For each prompt, plain decoding (depth 0), every fixed depth, the positional
auto controller and the older i.i.d. one (one acceptance rate for every
position) each decode the prompt greedily, in an order rotated from prompt to
prompt so that a shared machine's drift touches all alike. Each controller
lives through a whole run, as it lives through a session in the app, and
starts afresh each run. Per run it prints each configuration's overall
speed-up over plain (tokens over seconds, summed over the prompts), the best
fixed depth, and each auto controller against it: by wall-clock seconds, and
by the process's CPU seconds, which a busy machine disturbs less (each reply
first finds its prompt in the cache, so every configuration pays the same).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/auto_depth.py [--repeats 3] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from specchat.cli.bench import load_prompts
from specchat.core.engine.depth import AdaptiveDepth, DepthControl
from specchat.core.engine.speculative import generate
from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, Finished, GenerationParams, SpecchatError, Verified

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "prompts"
DEFAULT_PROMPTS = [SHARED / "public.jsonl", SHARED / "mixed-public.jsonl"]
# Varied kinds: an explanation, code, a story, an e-mail, JSON, verbatim copying.
DEFAULT_IDS = ["explain-bicycle", "code-fizzbuzz", "story", "email", "json", "m-copy"]
AUTO, AUTO_IID = "auto", "auto-iid"


@dataclass
class Tally:
    """Tokens and seconds summed over a run's prompts for one configuration."""

    tokens: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    per_prompt: list[float] = field(default_factory=list)

    def rate(self, cpu: bool = False) -> float:
        seconds = self.cpu_seconds if cpu else self.seconds
        return self.tokens / seconds if seconds else 0.0


def decode(
    runtime: Runtime, prompt: list[int], params: GenerationParams, depth: int | None, adaptive: AdaptiveDepth
) -> tuple[list[int], int, float, float]:
    """One greedy reply: (its tokens, tokens generated, generation seconds, CPU seconds of the whole call)."""
    kind = DrafterKind.NONE if depth == 0 else DrafterKind.DRAFT_MODEL
    tokens: list[int] = []
    cpu = time.process_time()
    for event in generate(
        runtime.target_side, runtime.drafter_for(kind), prompt, params, depth=DepthControl(depth), adaptive=adaptive
    ):
        if isinstance(event, Verified):
            tokens.extend(event.committed)
        elif isinstance(event, Finished):
            if event.message:
                raise SpecchatError(event.message)
            return tokens, event.stats.generated, event.stats.generate_seconds, time.process_time() - cpu
    raise SpecchatError("the reply ended without figures")


def one_run(
    runtime: Runtime, prompts: list[tuple[str, list[int]]], params: GenerationParams, depths: list[int]
) -> dict[str, Tally]:
    """Every configuration on every prompt, interleaved; returns the tallies by configuration name."""
    controllers = {AUTO: AdaptiveDepth(), AUTO_IID: AdaptiveDepth(positional=False)}
    names = ["plain", *(f"d{k}" for k in depths), AUTO, AUTO_IID]
    tallies = {name: Tally() for name in names}
    mismatches: list[str] = []
    for j, (pid, prompt) in enumerate(prompts):
        order = names[j % len(names) :] + names[: j % len(names)]
        outputs: dict[str, list[int]] = {}
        decode(runtime, prompt, dataclasses.replace(params, max_tokens=1), 0, AdaptiveDepth())  # caches the prompt
        for name in order:
            if name in controllers:
                depth, adaptive = None, controllers[name]
            else:
                depth, adaptive = (0 if name == "plain" else int(name[1:])), AdaptiveDepth()
            tokens, n, seconds, cpu_seconds = decode(runtime, prompt, params, depth, adaptive)
            outputs[name] = tokens
            tally = tallies[name]
            tally.tokens += n
            tally.seconds += seconds
            tally.cpu_seconds += cpu_seconds
            tally.per_prompt.append(n / seconds if seconds else 0.0)
        mismatches += [f"{pid}/{name}" for name, tokens in outputs.items() if tokens != outputs["plain"]]
        plain = tallies["plain"].per_prompt[-1]
        speedups = {name: tallies[name].per_prompt[-1] / plain for name in names}
        print(f"  {pid:16s} " + " ".join(f"{name}={s:.2f}" for name, s in speedups.items()), file=sys.stderr)
    if mismatches:
        print(f"  greedy replies that differ from plain decoding: {', '.join(mismatches)}", file=sys.stderr)
    for name, ctrl in controllers.items():
        curve = " ".join(f"{a:.2f}" for a in ctrl.acceptance_curve()[:10])
        print(f"  {name} acceptance curve at the end (positions 1-10): {curve}", file=sys.stderr)
    return tallies


class RunResult(NamedTuple):
    best_depth: str
    best_speedup: float
    auto: float  # auto's speed-up over the best fixed depth's
    auto_iid: float


def report(tallies: dict[str, Tally], cpu: bool) -> RunResult:
    """Print one run's speed-ups and return how each auto controller compares with the best fixed depth."""
    plain = tallies["plain"].rate(cpu)
    speedup = {name: t.rate(cpu) / plain for name, t in tallies.items() if name != "plain"}
    fixed = {name: s for name, s in speedup.items() if name.startswith("d")}
    best = max(fixed, key=lambda name: fixed[name])
    print(f" by {'CPU' if cpu else 'wall-clock'} seconds:")
    print("  fixed: " + ", ".join(f"{name[1:]}: {s:.3f}x" for name, s in fixed.items()))
    print(f"  best fixed depth {best[1:]}: {fixed[best]:.3f}x")
    for name in (AUTO, AUTO_IID):
        print(f"  {name:8s}: {speedup[name]:.3f}x, {speedup[name] / fixed[best]:.1%} of the best fixed depth")
    return RunResult(best[1:], fixed[best], speedup[AUTO] / fixed[best], speedup[AUTO_IID] / fixed[best])


def summary(results: list[RunResult], label: str) -> None:
    for name in (AUTO, AUTO_IID):
        ratios = [res.auto if name == AUTO else res.auto_iid for res in results]
        print(
            f"{label}: {name} / best fixed per run: {' '.join(f'{x:.1%}' for x in ratios)}; "
            f"mean {statistics.mean(ratios):.1%}, min {min(ratios):.1%}"
        )


def prompts_by_id(paths: list[Path], ids: list[str]) -> dict[str, list[dict[str, str]]]:
    """The prompts named ``ids`` in the JSONL files ``paths``; an id found nowhere is one line."""
    by_id = {pid: messages for path in paths for pid, messages in load_prompts(path, None)}
    missing = [pid for pid in ids if pid not in by_id]
    if missing:
        raise SpecchatError(f"no prompt with id {', '.join(missing)} in {', '.join(map(str, paths))}")
    return by_id


def parse_depths(text: str) -> list[int]:
    try:
        depths = [int(part) for part in text.split(",")]
    except ValueError:
        raise SpecchatError(f"--depths: expected comma-separated whole numbers, got {text!r}") from None
    if not depths or any(not 1 <= k <= 16 for k in depths):
        raise SpecchatError(f"--depths: each depth must be 1-16, got {text!r}")
    return depths


def run_parser(description: str, ids: list[str], depths: str, repeats: int) -> argparse.ArgumentParser:
    """The options both auto-depth benchmarks take, with their defaults: prompts, ids, depths, repeats, tokens."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--prompts", type=Path, nargs="+", default=DEFAULT_PROMPTS)
    parser.add_argument("--ids", nargs="+", default=ids, help=f"prompt ids to use (default: {len(ids)} varied ones)")
    parser.add_argument("--depths", default=depths, help="fixed depths, comma-separated")
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--max-tokens", type=int, default=128)
    return parser


def checked_depths(args: argparse.Namespace) -> list[int]:
    """The fixed depths asked for, once --depths and --repeats are checked (a SpecchatError otherwise)."""
    depths = parse_depths(args.depths)
    if args.repeats < 1:
        raise SpecchatError(f"--repeats must be at least 1, got {args.repeats}")
    return depths


def main() -> int:
    parser = run_parser(__doc__.splitlines()[0], DEFAULT_IDS, "2,4,6,8", 3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    try:
        depths = checked_depths(args)
        by_id = prompts_by_id(args.prompts, args.ids)
        pair = provision_demo_pair()
        runtime = Runtime.load(pair.target, pair.draft, n_ctx=4096, n_threads=args.threads)
        prompts = [(pid, runtime.prompt(by_id[pid]).tokens) for pid in args.ids]
        params = GenerationParams(max_tokens=args.max_tokens)
        wall, cpu = [], []
        for r in range(args.repeats):
            print(f"run {r + 1}/{args.repeats}", flush=True)
            tallies = one_run(runtime, prompts, params, depths)
            wall.append(report(tallies, cpu=False))
            cpu.append(report(tallies, cpu=True))
    except SpecchatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary(wall, "wall-clock")
    summary(cpu, "CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
