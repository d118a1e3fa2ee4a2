"""How often greedy speculation leaves plain decoding, and whether each time was a float tie.

For each prompt and each depth, the demo pair decodes plainly (one token per
pass) and speculatively; where the two differ, the target's logit gap at the
first differing token is computed in a one-token-at-a-time decode
(tests/support/identity.py): under ``TIE_RELATIVE_GAP`` of the largest logit
(specchat/core/engine/verify.py; benchmarks/batch_shape_bound.py measures
it) it is a tie that the batched and single-token kernels can order either
way, anything more would be a real divergence (a bug).

    python benchmarks/tie_rate.py [--prompts ../shared/prompts/public.jsonl] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT.parent / "shared" / "prompts" / "public.jsonl"
    parser.add_argument(
        "--prompts",
        type=Path,
        nargs="+",
        default=[default if default.exists() else ROOT / "tests" / "data" / "prompts.jsonl"],
    )
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--depths", nargs="+", default=["1", "4", "8", "auto"])
    args = parser.parse_args()

    from specchat.cli.bench import load_prompts, run_once
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.runtime.runtime import Runtime
    from specchat.core.types import DrafterKind, GenerationParams, SamplerParams, parse_depth
    from support.identity import compare_greedy

    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, pair.draft, n_ctx=2048)
    params = GenerationParams(sampler=SamplerParams(), max_tokens=args.max_tokens)
    prompts = [p for path in args.prompts for p in load_prompts(path, None)]
    counts = {"identical": 0, "tie": 0, "divergence": 0}
    print(f"demo pair, {len(prompts)} prompts x depths {' '.join(args.depths)}, {args.max_tokens} tokens, greedy")
    for pid, messages in prompts:
        plain = run_once(runtime, messages, params, DrafterKind.NONE, 0)
        prompt = runtime.prompt(messages).tokens
        for depth in args.depths:
            spec = run_once(runtime, messages, params, DrafterKind.DRAFT_MODEL, parse_depth(depth))
            result = compare_greedy(runtime.target_context, prompt, plain.tokens, spec.tokens, params.sampler)
            kind = "identical" if result.identical else "tie" if result.tie else "divergence"
            counts[kind] += 1
            if kind != "identical":
                print(f"  {pid} depth {depth}: {result.describe()}")
    runs = sum(counts.values())
    print(
        f"runs {runs}: identical {counts['identical']}, ties {counts['tie']} ({counts['tie'] / runs:.1%}), "
        f"real divergences {counts['divergence']}"
    )
    runtime.close()
    return 1 if counts["divergence"] else 0


if __name__ == "__main__":
    sys.exit(main())
