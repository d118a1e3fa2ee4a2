"""Does the window's speed-up agree with ``specchat bench``? Both side by side, on the same pair.

The window calibrates plain decoding once per pair and settings (a fixed
48-token prompt, ``core/chat/baseline.py``) and divides each reply's tokens/s
by it. ``specchat bench`` decodes every prompt plainly and speculatively back
to back and divides the two. This script does both in one run on the demo
pair, prompt by prompt (calibrating again before each prompt, as the window
would have a recent one), and prints the window's ratio, bench's ratio and
how far apart they are; the goal is within 10% overall.

    python benchmarks/speedup_agreement.py [--prompts tests/data/prompts.jsonl] [--max-tokens 96]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from window_defaults import TEST_PROMPTS, window_setup  # the script's own folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, default=TEST_PROMPTS)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--limit", type=int, default=8)
    args = parser.parse_args()

    from specchat.cli.bench import bench, load_prompts, run_once
    from specchat.core.cancel import CancelToken
    from specchat.core.chat.baseline import baseline_key, measure_plain
    from specchat.core.types import DrafterKind

    w = window_setup(args.max_tokens)
    engine, s, sampler, params = w.engine, w.settings, w.sampler, w.params
    key = baseline_key(str(w.target), sampler, engine.n_ctx, "0/0")
    prompts = load_prompts(args.prompts, args.limit)

    print(f"demo pair, {len(prompts)} prompts, {args.max_tokens} tokens, auto depth, repeat penalty {s.repeat_penalty}")
    print(f"{'prompt':<18}{'calib tok/s':>12}{'reply tok/s':>12}{'window':>9}{'bench':>9}{'diff':>8}")
    window_num = window_den = bench_num = bench_den = 0.0
    for pid, messages in prompts:
        baseline = measure_plain(engine, key, sampler, CancelToken())
        assert baseline is not None
        spec, _ = run_once(engine, messages, params, DrafterKind.DRAFT_MODEL, None)
        (report,) = bench(engine, [(pid, messages)], params, DrafterKind.DRAFT_MODEL, [None])
        window = spec.tokens_per_s / baseline.tokens_per_second
        ratio = report.speedup
        print(f"{pid[:17]:<18}{baseline.tokens_per_second:>12.1f}{spec.tokens_per_s:>12.1f}"
              f"{window:>8.2f}x{ratio:>8.2f}x{window / ratio - 1:>+8.1%}")
        # Token-weighted, as bench's overall figure: total tokens over total time, per side.
        window_num += spec.generated
        window_den += spec.generated / window
        bench_num += report.per_prompt[0].tokens
        bench_den += report.per_prompt[0].tokens / ratio if ratio else 0.0
    overall_window = window_num / window_den
    overall_bench = bench_num / bench_den
    print(f"{'OVERALL':<18}{'':>24}{overall_window:>8.2f}x{overall_bench:>8.2f}x"
          f"{overall_window / overall_bench - 1:>+8.1%}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
