"""What taking drafts back costs on dense, hybrid and recurrent targets (the random-weight test models).

For each architecture in tests/models: plain greedy decoding of the target,
then speculation with the same model requantized (drafts almost all
accepted) and with a model of another seed (drafts almost all rejected:
every round takes positions back), at a fixed depth. Plain and speculative
runs take turns prompt by prompt. Printed per row: tokens per second, the
ratio to plain, how the target's cuts were made (in place, or restored from
a saved state) and the time the recoveries took per round.

``--no-snapshots`` also runs the in-place architectures with recurrent
snapshots off, so the saved-state path can be compared on the same model.

    python benchmarks/archs_rollback.py [--depth 4] [--max-tokens 160] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from specchat.core.engine.depth import DepthControl
from specchat.core.llama.context import Context, RollbackStats
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import MAX_DEPTH, DrafterKind, Finished, GenerationParams, SamplerParams

MODELS = Path(__file__).resolve().parent.parent / "tests" / "models"
ARCHS = ("llama", "qwen35", "lfm2", "granitehybrid", "mamba2")
PROMPTS = (
    "Tell me about the sea.",
    "Count to ten, please.",
    "Why is the sky blue? Explain it to a child.",
    "Write a short poem about autumn leaves.",
)


@dataclass
class Run:
    tokens: int = 0
    seconds: float = 0.0
    rounds: int = 0

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def one_reply(runtime: Runtime, prompt: str, params: GenerationParams, drafter: DrafterKind, depth: int) -> Run:
    runtime.target_context.truncate(0)
    if runtime.draft_context is not None:
        runtime.draft_context.truncate(0)
    session = Conversation(runtime)
    started = time.perf_counter()
    events = list(session.reply(prompt, params, drafter=drafter, depth=DepthControl(depth)))
    seconds = time.perf_counter() - started
    finished = events[-1]
    assert isinstance(finished, Finished)
    stats = finished.stats
    return Run(stats.generated, seconds, stats.rounds)


def measure(arch: str, draft: str, snapshots: int, args: argparse.Namespace) -> tuple[Run, Run, RollbackStats, str]:
    runtime = Runtime.load(
        MODELS / f"{arch}.gguf",
        MODELS / f"{arch}-{draft}.gguf",
        n_ctx=256,
        n_threads=args.threads,
        target_rollback=snapshots,
    )
    params = GenerationParams(sampler=SamplerParams(repeat_penalty=1.3), max_tokens=args.max_tokens)
    plain, spec = Run(), Run()
    stats = RollbackStats()
    ctx = runtime.target_context
    assert isinstance(ctx, Context)  # loaded here, never a remote target
    try:
        one_reply(runtime, PROMPTS[0], params, DrafterKind.NONE, 0)  # warm-up
        for _ in range(args.repeats):
            for prompt in PROMPTS:
                for run, kind, depth in ((plain, DrafterKind.NONE, 0), (spec, DrafterKind.DRAFT_MODEL, args.depth)):
                    ctx.stats.reset()
                    got = one_reply(runtime, prompt, params, kind, depth)
                    run.tokens += got.tokens
                    run.seconds += got.seconds
                    run.rounds += got.rounds
                    if kind is DrafterKind.DRAFT_MODEL:
                        s = ctx.stats
                        stats.in_place += s.in_place
                        stats.restores += s.restores
                        stats.restarts += s.restarts
                        stats.replayed_tokens += s.replayed_tokens
                        stats.checkpoints += s.checkpoints
                        stats.checkpoint_bytes = max(stats.checkpoint_bytes, s.checkpoint_bytes)
                        stats.seconds += s.seconds
        rollback = f"snapshots {ctx.rollback_depth}" if ctx.rollback_depth else "saved states"
        mode = "dense" if ctx.kind.value == "dense" else f"{ctx.kind.value}, {rollback}"
        return plain, spec, stats, mode
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1 suits these tiny models)")
    parser.add_argument("--no-snapshots", action="store_true", help="also run qwen35 and lfm2 without snapshots")
    args = parser.parse_args()

    print(
        f"depth {args.depth}, {args.max_tokens} tokens x {len(PROMPTS)} prompts x {args.repeats}, "
        f"{args.threads} thread(s); tok/s of the whole reply (prompt included)"
    )
    header = (
        f"{'model':14} {'draft':9} {'memory':26} {'plain':>8} {'spec':>8} {'ratio':>6} "
        f"{'rounds':>6} {'in place':>8} {'restored':>8} {'replayed':>8} {'state KB':>8} {'ms/round':>8}"
    )
    print(header)
    print("-" * len(header))
    cases = [(arch, draft, MAX_DEPTH) for arch in ARCHS for draft in ("q8", "seed2-q8")]
    if args.no_snapshots:
        cases += [(arch, draft, 0) for arch in ("qwen35", "lfm2") for draft in ("q8", "seed2-q8")]
    for arch, draft, snapshots in cases:
        plain, spec, stats, mode = measure(arch, draft, snapshots, args)
        per_round = 1000 * stats.seconds / max(spec.rounds, 1)
        print(
            f"{arch:14} {draft:9} {mode:26} {plain.rate:8.0f} {spec.rate:8.0f} {spec.rate / plain.rate:6.2f} "
            f"{spec.rounds:6d} {stats.in_place:8d} {stats.restores:8d} {stats.replayed_tokens:8d} "
            f"{stats.checkpoint_bytes / 1024:8.0f} {per_round:8.3f}"
        )


if __name__ == "__main__":
    main()
