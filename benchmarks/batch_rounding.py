"""How far a verify batch's logits stray from one-token decoding, on the agent session's long first prompt.

The test suite calls a greedy difference a tie when the target's logit gap at
the first differing token is under ``TIE_RELATIVE_GAP`` of the largest logit
there (specchat/core/engine/verify.py; benchmarks/batch_shape_bound.py
measures the bound on the public prompts and on documents of 1k-4k tokens).
This measures the same thing where the server benchmark's agent session parts
(a 2-3k-token prompt, two threads): the target's greedy reply to edit 1 is
decoded one token at a time (the reference), then again in verify-sized batches
of 2 to 16 tokens, after the prompt read in one batch and after the prompt read
in two parts (as a server that reuses an earlier request's prefix reads it).
Per batch size: the largest |logit difference| over the largest |logit|, at any
position of the reply, and whether the argmax moved.

    python benchmarks/batch_rounding.py [--threads 2] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    args = parser.parse_args()

    from server_vs_llama_server import EDITS, file_150

    from specchat.core.engine.verify import TIE_RELATIVE_GAP
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.runtime.runtime import Runtime

    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, None, n_ctx=4096, n_threads=args.threads)
    ctx = runtime.target_context
    messages = [
        {
            "role": "system",
            "content": "You edit code. Reply with the whole edited file in one code block and nothing else.",
        },
        {"role": "user", "content": f"Here is shop.py:\n```python\n{file_150()}```\n{EDITS[0]}"},
    ]
    prompt = runtime.target.tokenize(runtime.template.render(messages), add_special=True, parse_special=True)

    # The reference: the prompt in one go, then the greedy reply one token per decode.
    ctx.truncate(0)
    row = np.array(ctx.decode(prompt)[0])
    reply: list[int] = []
    rows: list[np.ndarray] = []
    for _ in range(args.max_tokens):
        rows.append(row)
        reply.append(int(np.argmax(row)))
        row = np.array(ctx.decode([reply[-1]])[0])
    reference = np.stack(rows)  # row i: the logits that chose reply[i]
    scale = float(np.abs(reference).max())
    gaps = np.sort(reference, axis=1)
    margin = (gaps[:, -1] - gaps[:, -2]) / np.abs(reference).max(axis=1)
    print(
        f"prompt {len(prompt)} tokens, reply {len(reply)} tokens, {args.threads} threads; largest |logit| "
        f"{scale:.1f}; smallest top-two gap in the reply {margin.min():.2e} of its row's largest |logit|"
    )

    splits = {"prompt in one batch": [len(prompt)], "prompt in two parts": [len(prompt) // 3, len(prompt)]}
    print(f"{'prompt read':<22}{'batch':>6}{'max |diff|':>12}{'relative':>10}{'argmax moved':>14}")
    worst = 0.0
    for label, cuts in splits.items():
        for size in args.sizes:
            ctx.truncate(0)
            start = 0
            for cut in cuts:
                last = np.array(ctx.decode(prompt[start:cut])[0])
                start = cut
            got = [last]
            for i in range(0, len(reply) - 1, size):
                chunk = reply[i : i + size]
                got.extend(np.array(ctx.decode(chunk, all_logits=True)))
            batched = np.stack(got[: len(reply)])
            diff = np.abs(batched - reference)
            relative = float((diff.max(axis=1) / np.abs(reference).max(axis=1)).max())
            worst = max(worst, relative)
            moved = int((batched.argmax(axis=1) != reference.argmax(axis=1)).sum())
            print(f"{label:<22}{size:>6}{diff.max():>12.4f}{relative:>10.2e}{moved:>14}")
    print(f"largest relative difference: {worst:.2e} (the suite's tie bound: {TIE_RELATIVE_GAP:g})")
    runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
