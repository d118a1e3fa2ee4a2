"""Does the window's speed-up agree with ``specchat bench``? Both side by side, on the same pair.

The window times plain decoding right after each reply, from where it ended
(``GenerationParams.plain_probe``, 16 tokens), and divides the reply's
tokens/s by that. ``specchat bench`` decodes every prompt plainly and then
speculatively and divides the two. This script does both on the same
speculative run, prompt by prompt, so the two figures differ only in their
denominator: plain decoding of the whole reply run just before it (bench) or
plain decoding of 16 tokens right after it (the window). The drafter and the
depth are the window's defaults (the composite, auto depth) unless given.

    python benchmarks/speedup_agreement.py [--prompts tests/data/prompts.jsonl] [--max-tokens 96] [--repeat 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

from window_defaults import TEST_PROMPTS, window_setup  # the script's own folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, default=TEST_PROMPTS)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the prompts")
    parser.add_argument("--drafter", default="composite", help="composite, draft, ngram")
    args = parser.parse_args()

    from specchat.cli.bench import load_prompts, run_once
    from specchat.core.chat.baseline import PROBE_TOKENS
    from specchat.core.types import DrafterKind

    w = window_setup(args.max_tokens)
    runtime, s = w.runtime, w.settings
    plain_params = w.params
    probed = dataclasses.replace(plain_params, plain_probe=PROBE_TOKENS)
    drafter = DrafterKind(args.drafter)
    prompts = load_prompts(args.prompts, args.limit)

    print(
        f"demo pair, {len(prompts)} prompts x {args.repeat}, {args.max_tokens} tokens, {drafter.value}, auto depth, "
        f"repeat penalty {s.repeat_penalty}, plain probe {PROBE_TOKENS} tokens"
    )
    print(
        f"{'prompt':<18}{'plain tok/s':>12}{'probe tok/s':>12}{'reply tok/s':>12}{'window':>9}{'bench':>9}{'diff':>8}"
    )
    diffs: list[float] = []
    window_den = bench_den = tokens = 0.0
    for _ in range(args.repeat):
        for pid, messages in prompts:
            base = run_once(runtime, messages, plain_params, DrafterKind.NONE, 0)
            spec = run_once(runtime, messages, probed, drafter, None)
            final = spec.figures.final
            assert final is not None
            if final.plain_tokens_per_second <= 0:
                print(f"{pid[:17]:<18} no probe ({final.plain_tokens} tokens)")
                continue
            window = spec.tokens_per_s / final.plain_tokens_per_second
            ratio = spec.tokens_per_s / base.tokens_per_s
            diffs.append(window / ratio - 1)
            print(
                f"{pid[:17]:<18}{base.tokens_per_s:>12.1f}{final.plain_tokens_per_second:>12.1f}"
                f"{spec.tokens_per_s:>12.1f}{window:>8.2f}x{ratio:>8.2f}x{diffs[-1]:>+8.1%}"
            )
            # Token-weighted, as bench's overall figure: total tokens over total time, per side.
            tokens += spec.generated
            window_den += spec.generated / window
            bench_den += spec.generated / ratio
    overall_window, overall_bench = tokens / window_den, tokens / bench_den
    print(
        f"{'OVERALL':<18}{'':>36}{overall_window:>8.2f}x{overall_bench:>8.2f}x"
        f"{overall_window / overall_bench - 1:>+8.1%}"
    )
    if len(diffs) > 1:
        spread = sorted(abs(d) for d in diffs)
        print(
            f"per prompt: median |diff| {statistics.median(spread):.1%}, worst {spread[-1]:.1%}, "
            f"within 10%: {sum(d <= 0.10 for d in spread)}/{len(spread)}"
        )
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
