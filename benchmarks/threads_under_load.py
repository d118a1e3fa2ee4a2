"""llama.cpp's threads on a busy machine: n against n-1 threads, spinning against sleeping waits, under load.

Each configuration runs in a child process of its own (OpenMP reads its wait
policy once, at start): the demo pair loaded as the window loads it, then a
plain reply and a speculative reply (the draft model, depth 4) of the same
prompt, each timed from its first to its last token. The configurations take
turns within each background load (0, 1 and 2 busy processes, each a
pure-Python spin loop; ``background_load.py``), so drift hits them alike; the
figures to compare are those of one load level.

    python benchmarks/threads_under_load.py [--loads 0 1 2] [--repeats 2] [--max-tokens 48] [--configs 2:spin ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from background_load import background_load

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
CONFIGS = (  # (threads, the waiting: OMP_WAIT_POLICY, or NAME=VALUE for another variable, or None for llama.cpp's
    # default; the thread count measured and chosen)
    (2, None, False),
    (1, None, False),
    (2, "PASSIVE", False),
    (2, None, True),
)


def parse_config(text: str) -> tuple[int, str | None, bool]:
    """``THREADS:WAITING`` (THREADS a number or ``adaptive``; WAITING ``spin``, ``PASSIVE`` or ``NAME=VALUE``, for
    example ``GOMP_SPINCOUNT=30000``: libgomp spins that long at a barrier, then sleeps) as a configuration."""
    threads, _, waiting = text.partition(":")
    adaptive = threads == "adaptive"
    return (2 if adaptive else int(threads), None if waiting in ("", "spin") else waiting, adaptive)


def child(threads: int, max_tokens: int, adaptive: bool) -> dict[str, float]:
    from specchat.core.engine.speculative import generate
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.runtime.runtime import Runtime
    from specchat.core.types import DrafterKind, Finished, GenerationParams, Verified

    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, pair.draft, n_ctx=2048, n_threads=None if adaptive else threads)
    prompt = runtime.prompt([{"role": "user", "content": PROMPT}]).tokens
    out: dict[str, float] = {}
    for name, kind, depth in (("plain", DrafterKind.NONE, 0), ("spec", DrafterKind.DRAFT_MODEL, 4)):
        from specchat.core.engine.depth import DepthControl

        drafter = runtime.drafter_for(kind)
        first = last = 0.0
        tokens = 0
        for event in generate(
            runtime.target_side, drafter, prompt, GenerationParams(max_tokens=max_tokens), depth=DepthControl(depth)
        ):
            if isinstance(event, Verified) and (event.accepted or event.correction is not None):
                last = time.perf_counter()
                first = first or last
            elif isinstance(event, Finished):
                tokens = event.stats.generated
        out[name] = (tokens - 1) / (last - first) if last > first else 0.0
        runtime.forget_contexts()
    runtime.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument(
        "--configs",
        type=parse_config,
        nargs="+",
        default=list(CONFIGS),
        help="THREADS:WAITING each (default: 2:spin 1:spin 2:PASSIVE adaptive:spin; see parse_config)",
    )
    parser.add_argument("--child", nargs=2, type=int, metavar=("THREADS", "ADAPTIVE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.max_tokens, bool(args.child[1]))))
        return 0
    print(f"{os.cpu_count()} CPUs; {args.max_tokens} tokens; configurations take turns within each load")
    print("| load | threads | waiting | plain tok/s | draft model tok/s |")
    print("|---|---|---|---|---|")
    for load in args.loads:
        configs = list(args.configs)
        rates: dict[tuple[int, str | None, bool], list[dict[str, float]]] = {c: [] for c in configs}
        with background_load(load):
            for rep in range(args.repeats):
                order = configs[rep % len(configs) :] + configs[: rep % len(configs)]
                for threads, policy, adaptive in order:
                    env = dict(os.environ)
                    env.pop("OMP_WAIT_POLICY", None)
                    env.pop("GOMP_SPINCOUNT", None)
                    if policy:
                        name, _, value = policy.rpartition("=")
                        env[name or "OMP_WAIT_POLICY"] = value
                    done = subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--child",
                            str(threads),
                            str(int(adaptive)),
                            "--max-tokens",
                            str(args.max_tokens),
                        ],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    rates[(threads, policy, adaptive)].append(json.loads(done.stdout.strip().splitlines()[-1]))
        for (threads, policy, adaptive), runs in rates.items():
            plain = ", ".join(f"{r['plain']:.1f}" for r in runs)
            spec = ", ".join(f"{r['spec']:.1f}" for r in runs)
            label = "adaptive" if adaptive else str(threads)
            print(
                f"| {load} | {label} | {policy or 'default (spin)'} | {plain} (median "
                f"{statistics.median(r['plain'] for r in runs):.1f}) | {spec} (median "
                f"{statistics.median(r['spec'] for r in runs):.1f}) |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
