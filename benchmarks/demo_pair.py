"""Speed of the speculative loop on the offline demo pair (F32 target, Q4_1 draft).

Runs every prompt of the shared benchmark file with plain target decoding and
with speculation, back to back in one process, and prints the figures the
project tracks (see docs/benchmarks.md). With --write it also rewrites its section of
docs/benchmarks.md.

    python benchmarks/demo_pair.py [--prompts FILE] [--max-tokens N] [--write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

from specchat.cli.bench import BenchReport, bench, format_table, load_prompts
from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, GenerationParams, SamplerParams

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROMPTS = ROOT.parent / "shared" / "prompts" / "public.jsonl"
FALLBACK_PROMPTS = ROOT / "tests" / "data" / "prompts.jsonl"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu}, {os.cpu_count()} cores, {system}, Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_prompts = DEFAULT_PROMPTS if DEFAULT_PROMPTS.exists() else FALLBACK_PROMPTS
    parser.add_argument("--prompts", type=Path, default=default_prompts)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--write", action="store_true", help="rewrite its section of docs/benchmarks.md")
    args = parser.parse_args()

    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, pair.draft, n_ctx=4096, n_threads=args.threads)
    prompts = load_prompts(args.prompts, None)
    greedy = GenerationParams(max_tokens=args.max_tokens)
    sections: list[tuple[str, list[BenchReport]]] = []

    def run(title: str, params: GenerationParams, drafter: DrafterKind, depths: list[int | None]) -> None:
        print(f"== {title}", file=sys.stderr)
        reports = bench(runtime, prompts, params, drafter, depths, progress=True)
        sections.append((title, reports))
        print(format_table(reports))

    run("Greedy, draft model", greedy, DrafterKind.DRAFT_MODEL, [None, 2, 4, 8])
    print(auto_vs_fixed(sections[0][1]))
    run("Greedy, n-gram lookup", greedy, DrafterKind.NGRAM, [None])
    hot = SamplerParams(temperature=0.8)
    run(
        "T=0.8, draft samples from q, exact rejection sampling",
        GenerationParams(sampler=hot, max_tokens=args.max_tokens, seed=1),
        DrafterKind.DRAFT_MODEL,
        [4],
    )
    run(
        "T=0.8, greedy draft then compare (llama.cpp server's rule)",
        GenerationParams(sampler=hot, max_tokens=args.max_tokens, seed=1, greedy_draft=True),
        DrafterKind.DRAFT_MODEL,
        [4],
    )

    if args.write:
        write_markdown(sections, args)
    return 0


def write_markdown(sections: list[tuple[str, list[BenchReport]]], args: argparse.Namespace) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Latest run: {now}, on {machine()}.",
        "",
        f"Command: `python benchmarks/demo_pair.py --max-tokens {args.max_tokens} --write` "
        f"({len(load_prompts(args.prompts, None))} prompts from `{args.prompts.name}`).",
        "",
        "Demo pair: SmolLM2-135M-Instruct, F32 target and Q4_1 draft. *native* is llama.cpp's own",
        "decode rate for the target in the same run (its perf counters: eval time / eval tokens), so",
        "Python overhead shows up as *plain / native* below 100%. *predicted* is the ceiling from the",
        "measured draft step, verify cost per batch size, per-round overhead and acceptance rate.",
        "",
        "| run | depth | plain tok/s | native tok/s | spec tok/s | speedup vs plain | vs native | plain/native "
        "| acceptance | accepted/round | predicted tok/s | reached | identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for title, reports in sections:
        for r in reports:
            ident = "-" if r.identical is None else ("yes" if r.identical else "NO")
            lines.append(
                f"| {title} | {r.depth} | {r.baseline_tokens_per_s:.1f} | {r.native_tokens_per_s:.1f} | "
                f"{r.speculative_tokens_per_s:.1f} | {r.speedup:.2f}x | {r.speedup_vs_native:.2f}x | "
                f"{r.plain_vs_native:.1%} | {r.acceptance_rate:.0%} | {r.mean_accepted_per_round:.2f} | "
                f"{r.predicted_tokens_per_s:.1f} | {r.fraction_of_predicted:.0%} | {ident} |"
            )
    lines += ["", auto_vs_fixed(sections[0][1])]
    lines += [
        "",
        "Sampler micro-benchmark (`python benchmarks/sampler_micro.py`, 152k-token vocabulary):",
        "",
        "```",
        *_micro_lines(),
        "```",
        "",
        "GUI-thread latency while a reply streams (`QT_QPA_PLATFORM=offscreen python benchmarks/gui_latency.py`;",
        "goal: longest gap between ticks of a 10 ms GUI timer under 50 ms):",
        "",
        "```",
        *_gui_latency_lines(),
        "```",
        "",
    ]
    from doc_section import replace_section

    replace_section("demo-pair", "\n".join(lines))


def auto_vs_fixed(reports: list[BenchReport]) -> str:
    """How close auto depth comes to the best fixed depth, as a ratio of speedups over plain.

    Each depth's speedup is measured against plain decoding interleaved prompt by
    prompt, so the ratio cancels drift in the machine's speed between runs.
    """
    auto = next((r for r in reports if r.depth == "auto"), None)
    fixed = [r for r in reports if r.depth != "auto"]
    if auto is None or not fixed:
        return ""
    best = max(fixed, key=lambda r: r.speedup)
    return (
        f"Auto depth against the best fixed depth ({best.depth}): speedup {auto.speedup:.2f}x vs "
        f"{best.speedup:.2f}x over plain, **{auto.speedup / best.speedup:.0%}** of it."
    )


def _micro_lines() -> list[str]:
    import contextlib
    import io

    import sampler_micro

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        sampler_micro.main()
    return buf.getvalue().rstrip().splitlines()


def _gui_latency_lines() -> list[str]:
    import subprocess

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gui_latency.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return [line for line in out.stdout.splitlines() if line.startswith(("reply:", "GUI timer"))] or [out.stderr[-500:]]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
