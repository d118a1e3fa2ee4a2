"""Does the draft finder predict what ``specchat bench`` measures? Five drafts of the demo target, side by side.

Builds drafts of the demo target (SmolLM2-135M, F32) with llama.cpp's quantizer (F16, Q8_0, Q4_0 and Q2_K
from the F32 file; Q4_1 is the shipped file the F32 was made from), cached under the app's cache dir. Runs
the advisor on them, then measures each at the advisor's best depth with the bench's interleaved
plain-vs-speculative runs on the advisor's own three prompts, the drafts taking turns prompt by prompt
(``--reps`` passes). Prints predicted against measured speed-up per draft and checks the two goals:
wherever two measured speed-ups differ by more than 10% the advisor orders them the same way, and each
prediction is within 15% of the measurement.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/advisor_accuracy.py [--budget 90] [--reps 2] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

QUANTS = ("F16", "Q8_0", "Q4_0", "Q2_K")  # made from the F32 target; Q4_1 is the shipped source file


def build_drafts(target: Path, source_q4_1: Path) -> dict[str, Path]:
    """The drafts by quant name, each built once and kept in the cache dir."""
    import llama_cpp

    from specchat.core import paths
    from specchat.core.llama.backend import ensure_backend

    ensure_backend()
    folder = paths.cache_dir() / "advisor-drafts"
    folder.mkdir(parents=True, exist_ok=True)
    out = {"Q4_1": source_q4_1}
    for quant in QUANTS:
        dest = folder / f"SmolLM2-135M-Instruct.{quant}.gguf"
        if not dest.is_file():
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant}")
            params.allow_requantize = True
            tmp = dest.with_suffix(".part")
            rc = llama_cpp.llama_model_quantize(str(target).encode(), str(tmp).encode(), params)
            if rc != 0:
                raise SystemExit(f"quantizing to {quant} failed (code {rc})")
            tmp.replace(dest)
        out[quant] = dest
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=90.0, help="the advisor's budget, seconds")
    parser.add_argument("--reps", type=int, default=2, help="bench passes over the prompts")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    from specchat.cli.bench import bench
    from specchat.core.advise.advisor import advise
    from specchat.core.advise.calibrate import PROMPTS
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.runtime.runtime import Runtime
    from specchat.core.types import DrafterKind, GenerationParams, SamplerParams

    pair = provision_demo_pair()
    drafts = build_drafts(pair.target, pair.draft)
    by_path = {str(p): q for q, p in drafts.items()}
    started = time.perf_counter()
    advice = advise(
        pair.target,
        list(drafts.values()),
        budget_seconds=args.budget,
        library=False,
        lookup=False,
        catalog=False,
        max_tokens=args.max_tokens,
        remember=False,
        progress=lambda m, f: print(f"  [{f:4.0%}] {m}", file=sys.stderr),
    )
    advised = time.perf_counter() - started
    predicted = {by_path[r.candidate.path]: r for r in advice.results if r.candidate.path in by_path}

    prompts = [(kind, [{"role": "user", "content": text}]) for kind, text in PROMPTS]
    params = GenerationParams(sampler=SamplerParams(temperature=0.0), max_tokens=args.max_tokens, seed=0)
    engines = {q: Runtime.load(pair.target, path, n_ctx=1024) for q, path in drafts.items()}
    sums = {q: [0.0, 0.0, 0.0, 0.0] for q in drafts}  # plain tokens, plain seconds, spec tokens, spec seconds
    for rep, (pid, messages) in itertools.product(range(args.reps), prompts):
        for quant, runtime in engines.items():
            r = predicted[quant]
            depth = r.prediction.best_depth if r.prediction is not None else 0
            (report,) = bench(runtime, [(pid, messages)], params, DrafterKind.DRAFT_MODEL, [depth])
            p = report.per_prompt[0]
            s = sums[quant]
            s[0] += p.tokens
            s[1] += p.tokens / p.baseline_tokens_per_s if p.baseline_tokens_per_s else 0.0
            s[2] += p.tokens
            s[3] += p.tokens / p.speculative_tokens_per_s if p.speculative_tokens_per_s else 0.0
            print(f"  pass {rep + 1} {pid}: {quant} depth {depth} {p.speedup:.2f}x", file=sys.stderr)
    measured = {q: (s[2] / s[3]) / (s[0] / s[1]) if s[1] and s[3] else 0.0 for q, s in sums.items()}

    rows: list[dict[str, Any]] = []  # one JSON object per draft
    print(
        f"advisor: {advised:.0f} s, of which measuring {advice.elapsed_seconds:.0f} s (budget {args.budget:g} s; "
        f"the rest reads the files' headers and loads them); bench: {args.reps} passes x {len(prompts)} prompts, "
        f"{args.max_tokens} tokens, greedy"
    )
    print(
        f"{'draft':<7}{'accept':>8}{'cost':>7}{'depth':>6}{'predicted':>10}{'measured':>10}{'error':>8}"
        f"{'confirm':>9}  why"
    )
    for quant in drafts:
        r = predicted[quant]
        guess = r.prediction
        pred = guess.speedup if guess is not None else 0.0
        error = pred / measured[quant] - 1 if measured[quant] else float("nan")
        confirm = f"{r.confirmation.speedup:.2f}x" if r.confirmation else "-"
        print(
            f"{quant:<7}{(guess.acceptance if guess else 0):>8.0%}{(guess.cost_ratio if guess else 0):>7.0%}"
            f"{(guess.best_depth if guess else 0):>6}{pred:>9.2f}x{measured[quant]:>9.2f}x{error:>+8.1%}{confirm:>9}  "
            f"{r.reason}"
        )
        rows.append(
            {
                "draft": quant,
                "predicted": round(pred, 3),
                "measured": round(measured[quant], 3),
                "error": round(error, 4),
                "best_depth": guess.best_depth if guess else None,
                "acceptance": round(guess.acceptance, 4) if guess else None,
                "cost": round(guess.cost_ratio, 4) if guess else None,
                "confirmed": r.confirmation is not None,
            }
        )

    disagreements = []
    for a, b in itertools.combinations(drafts, 2):
        ma, mb = measured[a], measured[b]
        if max(ma, mb) > 1.10 * min(ma, mb):
            pa, pb = predicted[a].speedup, predicted[b].speedup
            if (ma > mb) != (pa > pb):
                disagreements.append(f"{a} vs {b}")
    within = [row["draft"] for row in rows if abs(row["error"]) <= 0.15]
    print(
        f"order: {'agrees' if not disagreements else 'differs on ' + ', '.join(disagreements)} "
        "wherever measured speed-ups differ by more than 10%"
    )
    print(f"within 15%: {len(within)} of {len(rows)} ({', '.join(within) or 'none'})")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "disagreements": disagreements}, indent=1))
    for runtime in engines.values():
        runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
