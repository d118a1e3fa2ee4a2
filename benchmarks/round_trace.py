"""Round by round, what each drafter's reply did beside a background load: the arm, the drafts, the tokens kept, the
round's milliseconds and the drafting's share, and the thread count in use.

The demo pair with the window's reply settings; per repeat and drafter, the prompt is read ahead as the window
reads it while the user types (``--no-read-ahead``: the reply reads it, as ``specchat bench`` does), then the reply
decodes. One line per reply: its rate end to end, the thread
tuner's count, switches and tries, then each round as ``<arm><drafts>:<kept + 1>/<ms>(<drafting ms>)`` (arm:
``m`` model, ``l`` lookup, ``p`` plain for Automatic; ``?`` for a single drafter). A crawl (rounds of seconds
whichever drafter runs) and a choice that stays on a losing arm look different here. A round at depth 0 does not
ask the drafter: its token counts in the kept tokens and milliseconds of the round before it.

    python benchmarks/round_trace.py [--prompt m-proofread] [--load 2] [--repeats 2] [--max-tokens 64]
        [--drafters composite ngram draft] [--no-read-ahead]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from background_load import background_load
from window_defaults import ROOT, window_setup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=Path, default=ROOT / "tests" / "data" / "mixed-prompts.jsonl")
    parser.add_argument("--prompt", default="m-proofread", help="the prompt's id in --prompts")
    parser.add_argument("--load", type=int, default=2, help="busy background processes")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--drafters", nargs="+", default=["composite", "ngram", "draft"])
    parser.add_argument(
        "--no-read-ahead",
        action="store_true",
        help="each reply reads its own prompt, as `specchat bench` and the server do (not read ahead)",
    )
    args = parser.parse_args()

    from collections.abc import Callable

    from specchat.cli.bench import load_prompts
    from specchat.core.cancel import CancelToken
    from specchat.core.engine.drafters import Draft, Drafter, DraftRequest
    from specchat.core.engine.speculative import generate
    from specchat.core.llama.context import Context
    from specchat.core.runtime.read_ahead import read_ahead
    from specchat.core.types import Finished

    setup = window_setup(args.max_tokens)
    runtime = setup.runtime
    prompts = dict(load_prompts(args.prompts, None))
    if args.prompt not in prompts:
        parser.error(f"no prompt {args.prompt!r} in {args.prompts}")
    prompt = runtime.prompt(prompts[args.prompt]).tokens
    target = runtime.target_context
    assert isinstance(target, Context), "a local target (its thread tuner is traced)"
    tuner = target.tuner
    with background_load(args.load):
        for repeat in range(args.repeats):
            for name in args.drafters:
                runtime.forget_contexts()
                if not args.no_read_ahead:
                    read_ahead(runtime, prompt, CancelToken(), drafter=name, recall=False)
                drafter = runtime.drafter_for(name)
                rounds: list[tuple[int, float, str, int, float]] = []  # committed, start, arm, drafts, drafting s
                own = drafter.draft

                def traced(
                    request: DraftRequest,
                    own: Callable[[DraftRequest], Draft] = own,
                    drafter: Drafter = drafter,
                    rounds: list[tuple[int, float, str, int, float]] = rounds,
                ) -> Draft:
                    started = time.perf_counter()
                    out = own(request)
                    arm = getattr(getattr(drafter, "_pending", None), "arm", "?")
                    rounds.append((len(request.tokens), started, arm, len(out.tokens), time.perf_counter() - started))
                    return out

                drafter.draft = traced  # type: ignore[method-assign]
                stats = None
                for event in generate(
                    runtime.target_side, drafter, prompt, setup.params, adaptive=runtime.adaptive_for(name)
                ):
                    if isinstance(event, Finished):
                        stats = event.stats
                ended = time.perf_counter()
                del drafter.draft
                assert stats is not None
                cells = []
                for i, (committed, started, arm, drafts, drafting) in enumerate(rounds):
                    kept = f"{rounds[i + 1][0] - committed}" if i + 1 < len(rounds) else "end"
                    seconds = (rounds[i + 1][1] if i + 1 < len(rounds) else ended) - started
                    cells.append(f"{arm[0]}{drafts}:{kept}/{seconds * 1000:.0f}({drafting * 1000:.0f})")
                rate = stats.generated / (stats.prompt_seconds + stats.generate_seconds)
                print(
                    f"{args.load} busy, repeat {repeat}, {name}: {rate:.1f} tok/s, {stats.generated} tokens; threads "
                    f"{tuner.current} ({tuner.switches} switches, {tuner.tries} tries); rounds: {' '.join(cells)}",
                    flush=True,
                )
    runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
