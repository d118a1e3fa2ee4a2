"""Decode by decode, the thread count the tuner chose and what the decode took, beside a background load.

The demo pair loaded as the window loads it; after ``--settle`` seconds of the load, one reply per drafter named
(in order, the tuner kept between them as in the window). Per reply: its rate, the tuner's counts (the first is the
one it started with), tries and switches, then every decode as ``<threads><T target | d draft><tokens>:<ms>``. A
try of another count shows as a run of decodes with that count; a stall as a decode of seconds.

    python benchmarks/thread_trace.py [--load 2] [--settle 5] [--max-tokens 192] [--drafters none none draft]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from background_load import background_load
from window_defaults import window_setup

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=2, help="busy background processes")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of load before the first reply")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--drafters", nargs="+", default=["none", "none", "draft"])
    args = parser.parse_args()

    from specchat.core.engine.speculative import generate
    from specchat.core.llama.context import Context
    from specchat.core.types import Finished

    setup = window_setup(args.max_tokens)
    runtime = setup.runtime
    target = runtime.target_context
    assert isinstance(target, Context), "a local target (its thread tuner is traced)"
    tuner = target.tuner
    decodes: list[tuple[int, int, float, bool]] = []  # threads, tokens, seconds, by the target
    observe = tuner.observe

    def traced(threads: int, n_tokens: int, seconds: float, key: int = 0) -> None:
        decodes.append((threads, n_tokens, seconds, key == id(target)))
        observe(threads, n_tokens, seconds, key)

    tuner.observe = traced  # type: ignore[method-assign]
    prompt = runtime.prompt([{"role": "user", "content": PROMPT}]).tokens
    with background_load(args.load):
        time.sleep(args.settle)
        for name in args.drafters:
            runtime.forget_contexts()
            decodes.clear()
            started = time.perf_counter()
            stats = None
            for event in generate(
                runtime.target_side,
                runtime.drafter_for(name),
                prompt,
                setup.params,
                adaptive=runtime.adaptive_for(name),
            ):
                if isinstance(event, Finished):
                    stats = event.stats
            assert stats is not None
            rate = stats.generated / (time.perf_counter() - started)
            print(
                f"{args.load} busy, {name}: {rate:.1f} tok/s; counts {tuner.counts}, {tuner.tries} tries, "
                f"{tuner.switches} switches",
                flush=True,
            )
            print(" ".join(f"{t}{'T' if by_target else 'd'}{n}:{s * 1000:.0f}" for t, n, s, by_target in decodes))
    runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
