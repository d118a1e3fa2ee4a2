"""What the demo draft costs on this CPU in each quantisation: a prompt token read, a draft step.

The demo pair's draft is the shipped Q4_1 its F32 target is made from; here that Q4_1, and the F32
requantized to Q8_0 and Q4_0 (cached under the app's cache dir), each read the same prompt and decode the
same tokens one at a time, taking turns (the order reversed every other repeat), so drift falls on all
alike. Printed per quantisation: the median milliseconds per prompt token read, per single-token decode
(a draft step), and the F32 target's read beside them for scale.

    python benchmarks/draft_quant_costs.py [--repeats 8] [--threads N] [--prompt-id m-proofread]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from specchat.cli.bench import load_prompts
from specchat.core import paths
from specchat.core.llama.quantize import requantize
from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
STEPS = 16


def made(target: Path, quant: str) -> Path:
    """The F32 target requantized to ``quant``, made once under the cache dir."""
    dest = paths.cache_dir() / "draft-quants" / f"{target.stem.removesuffix('.F32')}.{quant}.gguf"
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        requantize(target, part, quant)
        part.replace(dest)
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="a fixed thread count (default: measured)")
    parser.add_argument("--prompt-id", default="m-proofread")
    args = parser.parse_args()
    pair = provision_demo_pair()
    drafts = {"Q4_1": pair.draft, "Q8_0": made(pair.target, "Q8_0"), "Q4_0": made(pair.target, "Q4_0")}
    runtimes = {q: Runtime.load(pair.target, d, n_ctx=2048, n_threads=args.threads) for q, d in drafts.items()}
    messages = dict(load_prompts(ROOT / "tests" / "data" / "mixed-prompts.jsonl", None))[args.prompt_id]
    prompt = runtimes["Q4_1"].prompt(messages).tokens
    figures: dict[str, dict[str, list[float]]] = {q: {"read": [], "step": [], "target read": []} for q in drafts}
    for repeat in range(args.repeats):
        order = list(runtimes.items()) if repeat % 2 == 0 else list(runtimes.items())[::-1]
        for quant, runtime in order:
            draft = runtime.draft_context
            assert draft is not None
            draft.truncate(0)
            started = time.perf_counter()
            draft.extend_to(prompt)
            figures[quant]["read"].append((time.perf_counter() - started) / len(prompt))
            started = time.perf_counter()
            for token in prompt[:STEPS]:
                draft.decode([token])
            figures[quant]["step"].append((time.perf_counter() - started) / STEPS)
            runtime.target_context.truncate(0)
            started = time.perf_counter()
            runtime.target_context.extend_to(prompt)
            figures[quant]["target read"].append((time.perf_counter() - started) / len(prompt))
    print(f"{args.prompt_id}: {len(prompt)} prompt tokens, {args.repeats} repeats, median ms")
    print("| draft | read a prompt token | a draft step | the F32 target's read |")
    print("|---|---|---|---|")
    for quant, f in figures.items():
        cells = " | ".join(f"{statistics.median(f[k]) * 1000:.2f}" for k in ("read", "step", "target read"))
        print(f"| {quant} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
