"""Does a race's ratio agree with ``specchat bench``? Both on the same prompts, one after the other.

A race (core/chat/race.py) decodes a greedy reply's prompt again, a
speculative and a plain run taking turns in blocks, and divides the two
finish times (each run's own rounds).
``specchat bench`` decodes the prompt plainly then speculatively and divides
the tokens/s. This script does a race and a bench run per prompt on the demo
pair, with the window's sampler and auto depth, and prints both ratios and
whether the race's texts were identical.

    python benchmarks/race_agreement.py [--prompts tests/data/prompts.jsonl] [--max-tokens 96] [--limit 6]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from window_defaults import TEST_PROMPTS, window_setup  # the script's own folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, default=TEST_PROMPTS)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--limit", type=int, default=6)
    args = parser.parse_args()

    from specchat.cli.bench import bench, load_prompts
    from specchat.core.cancel import CancelToken
    from specchat.core.chat.race import RaceRequest, run_race
    from specchat.core.chat.race_record import committed_pieces
    from specchat.core.chat.transcript import ReplyFigures, spans_of
    from specchat.core.engine.depth import DepthControl
    from specchat.core.runtime.conversation import Conversation
    from specchat.core.types import DrafterKind, Verified

    w = window_setup(args.max_tokens)
    runtime, s, sampler, params = w.runtime, w.settings, w.sampler, w.params
    prompts = load_prompts(args.prompts, args.limit)

    print(f"demo pair, {len(prompts)} prompts, {args.max_tokens} tokens, auto depth, repeat penalty {s.repeat_penalty}")
    print(f"{'prompt':<18}{'spec s':>8}{'plain s':>9}{'race':>8}{'bench':>8}{'diff':>8}  text")
    race_spec = race_plain = bench_spec = bench_plain = 0.0
    for pid, messages in prompts:
        session = Conversation(runtime, messages[:-1])
        figures = ReplyFigures()
        spans = []
        for event in session.reply(
            messages[-1]["content"], params, drafter=DrafterKind.DRAFT_MODEL, depth=DepthControl(None)
        ):
            figures.fold([event])
            if isinstance(event, Verified):
                spans.extend(spans_of(event))
        pieces = tuple(committed_pieces(spans))
        request = RaceRequest(0, messages, sampler, figures.generated, pieces, DrafterKind.DRAFT_MODEL.value, None)
        record = run_race(runtime, request, CancelToken())
        assert record is not None
        spec_s, plain_s = record.spec.finish_seconds, record.plain.finish_seconds
        (report,) = bench(runtime, [(pid, messages)], params, DrafterKind.DRAFT_MODEL, [None])
        ratio = plain_s / spec_s
        text = "identical" if record.fork is None else record.fork.describe()
        print(
            f"{pid[:17]:<18}{spec_s:>8.2f}{plain_s:>9.2f}{ratio:>7.2f}x{report.speedup:>7.2f}x"
            f"{ratio / report.speedup - 1:>+8.1%}  {text}"
        )
        race_spec += spec_s
        race_plain += plain_s
        result = report.per_prompt[0]  # token-weighted overall, as bench's: total time per side
        bench_spec += result.tokens / result.speculative_tokens_per_s
        bench_plain += result.tokens / result.baseline_tokens_per_s
    overall_race = race_plain / race_spec
    overall_bench = bench_plain / bench_spec if bench_spec else 0.0
    print(
        f"{'OVERALL':<18}{race_spec:>8.2f}{race_plain:>9.2f}{overall_race:>7.2f}x{overall_bench:>7.2f}x"
        f"{overall_race / overall_bench - 1 if overall_bench else 0.0:>+8.1%}"
    )
    runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
