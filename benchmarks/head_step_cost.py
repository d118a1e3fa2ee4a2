"""What a drafter head's step costs relative to one target pass, on the test fixtures (or any pair given).

For each head and target, measured side by side (interleaved, medians):

* ``target``: the target decoding one token, without a head following it;
* ``follow``: what a head adds to that decode (EAGLE-3: its encoder and one decoder pair; DFlash/DSpark:
  one feature injection), paid on every target batch whichever drafter runs;
* ``draft``: EAGLE-3: the seed decode and each further chained step; DFlash/DSpark: one block decode at
  depth 4 and at the full trained block.

    python benchmarks/head_step_cost.py [--reps 200] [--threads 1] [--targets llama,qwen35]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from specchat.core.llama.context import Context
from specchat.core.llama.heads import DFlashContext, Eagle3Context, open_head
from specchat.core.llama.model import Model

MODELS = Path(__file__).resolve().parent.parent / "tests" / "models"
PROMPT = [(7 * i + 3) % 120 for i in range(64)]


def median_ms(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def one_token_ms(ctx: Context, reps: int) -> float:
    """Median of ``reps`` one-token decodes going forward from the prompt (the cut back is not timed:
    a hybrid target could only make it by restoring a saved state)."""
    times = []
    for i in range(reps):
        started = time.perf_counter()
        ctx.decode([PROMPT[i % len(PROMPT)]])
        times.append(time.perf_counter() - started)
    ctx.truncate(len(PROMPT))
    return statistics.median(times) * 1e3


def measure(target_name: str, head_name: str, reps: int, threads: int) -> dict[str, float]:
    model = Model(MODELS / f"{target_name}.gguf")
    head_model = Model(MODELS / f"{head_name}-llama.gguf")
    plain = Context(model, n_ctx=256, n_threads=threads, rollback=16)
    followed = Context(model, n_ctx=256, n_threads=threads, rollback=16)
    head = open_head(followed, head_model, n_threads=threads)
    try:
        for ctx in (plain, followed):
            ctx.decode(PROMPT)
        out: dict[str, list[float]] = {}
        pos = len(PROMPT)
        last = PROMPT[-1]
        for _ in range(5):  # interleaved rounds
            out.setdefault("target", []).append(one_token_ms(plain, reps // 5))
            out.setdefault("followed", []).append(one_token_ms(followed, reps // 5))
            if isinstance(head, Eagle3Context):

                def seed() -> None:
                    head.begin(last, pos)
                    head.end(pos)

                def chain(h: Eagle3Context = head) -> None:
                    h.begin(last, pos)
                    h.step(5)
                    h.end(pos)

                out.setdefault("seed", []).append(median_ms(seed, reps // 5))
                out.setdefault("seed+step", []).append(median_ms(chain, reps // 5))
            else:
                assert isinstance(head, DFlashContext)
                for k in sorted({4, head.max_draft}):

                    def block(h: DFlashContext = head, k: int = k) -> None:
                        h.block(last, pos, k)

                    out.setdefault(f"block k={k}", []).append(median_ms(block, reps // 5))
        result = {name: statistics.median(values) for name, values in out.items()}
        result["follow"] = result.pop("followed") - result["target"]
        if "seed+step" in result:
            result["step"] = result.pop("seed+step") - result["seed"]
        return result
    finally:
        head.close()
        plain.close()
        followed.close()
        head_model.close()
        model.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--targets", default="llama,qwen35")
    parser.add_argument("--heads", default="eagle3,dflash,dflash2,dspark")
    args = parser.parse_args(argv)
    print(
        f"# {platform.machine()} {platform.processor() or ''}, {args.threads} thread(s), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; ratios to one target pass (1 token)"
    )
    for target in args.targets.split(","):
        for head in args.heads.split(","):
            r = measure(target, head, args.reps, args.threads)
            base = r.pop("target")
            parts = ", ".join(f"{name} {ms / base:.2f}x" for name, ms in r.items())
            print(f"{head:>6} on {target:<6}: target pass {base:.3f} ms; {parts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
