"""What taking drafts back costs inside a shared batch, on dense, hybrid and recurrent targets.

The batched counterpart of archs_rollback.py, on the same random-weight test
models: ``--width`` replies decode together in one
:class:`~specchat.core.engine.batched.BatchedEngine` on a
:class:`~specchat.core.llama.multi_context.MultiContext`, first plainly (no
drafts), then with drafts that are all kept (each reply's own plain greedy
continuation) and with drafts that are all taken back (that continuation
with its first token wrong: every round cuts every sequence back by the
whole depth). Printed per row: the batch's tokens per second over all its
replies, the ratio to plain batched decoding, how the cuts were made (in
place, or restored from a saved state) and the time the recoveries took per
sequence-round.

``--no-snapshots`` also runs qwen35 and lfm2 with recurrent snapshots off,
so the saved-state path can be compared on the same model.

    python benchmarks/archs_rollback_batched.py [--width 4] [--depth 4] [--max-tokens 96] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specchat.core.engine.batched import BatchedEngine
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.drafters import Draft, Drafter, DraftRequest, NoDrafter
from specchat.core.engine.sampling import apply_repetition_penalty
from specchat.core.llama.context import Context
from specchat.core.llama.model import Model
from specchat.core.llama.multi_context import MultiContext
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import MAX_DEPTH, DrafterKind, Finished, GenerationParams, SamplerParams, Verified

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archs_rollback import ARCHS, MODELS, PROMPTS  # the same fixtures and prompts as the one-sequence figures

SAMPLER = SamplerParams(repeat_penalty=1.3)


class Continuation(Drafter):
    """Drafts a reply's plain greedy continuation; ``wrong``: with its first token changed (all rejected)."""

    kind = DrafterKind.NGRAM.value

    def __init__(self, prompt: Sequence[int], plain: Sequence[int], wrong: bool, vocab: int) -> None:
        self.n_prompt, self.plain, self.wrong, self.vocab = len(prompt), list(plain), wrong, vocab

    def draft(self, request: DraftRequest) -> Draft:
        done = len(request.tokens) - self.n_prompt
        guess = self.plain[done : done + request.k]
        if self.wrong and guess:
            guess[0] = (guess[0] + 1) % self.vocab
        return Draft(tokens=guess, probs=[1.0] * len(guess))


@dataclass
class Run:
    tokens: int = 0
    seconds: float = 0.0
    rounds: int = 0  # sequence-rounds that drafted

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def plain_greedy(ctx: Context, prompt: Sequence[int], n: int) -> list[int]:
    ctx.truncate(0)
    row = ctx.decode(list(prompt))[0]
    history, out = list(prompt), list[int]()
    while len(out) < n:
        token = int(np.argmax(apply_repetition_penalty(row, history[-SAMPLER.repeat_last_n :], SAMPLER)))
        out.append(token)
        history.append(token)
        row = ctx.decode([token])[0]
    return out


def one_batch(
    multi: MultiContext,
    prompts: Sequence[Sequence[int]],
    plains: Sequence[Sequence[int]],
    mode: str,
    args: argparse.Namespace,
) -> Run:
    """Every prompt's reply at once; ``mode``: plain, kept or rejected drafts."""
    for slot in range(multi.n_seq):
        multi.clear(slot)
    engine = BatchedEngine(multi, frozenset(), multi.model.piece, verify_budget=multi.n_seq * (args.depth + 1))
    params = GenerationParams(sampler=SAMPLER, max_tokens=args.max_tokens)
    started = time.perf_counter()
    for prompt, plain in zip(prompts, plains, strict=True):
        if mode == "plain":
            drafter: Drafter = NoDrafter()
            depth = 0
        else:
            drafter = Continuation(prompt, plain, mode == "rejected", multi.n_vocab)
            depth = args.depth
        engine.admit(prompt, params, drafter, depth=DepthControl(depth))
    run = Run()
    while engine.active:
        for _, event in engine.step():
            if isinstance(event, Verified) and (event.accepted or event.rejected):
                run.rounds += 1
            elif isinstance(event, Finished):
                run.tokens += event.stats.generated
    run.seconds = time.perf_counter() - started
    return run


def measure(
    arch: str, snapshots: int, args: argparse.Namespace
) -> tuple[int, list[tuple[str, Run, Run, dict[str, float]]]]:
    """Per draft mode: plain batched decoding, the batch with those drafts, its cuts; and the snapshots granted."""
    runtime = Runtime(Model(MODELS / f"{arch}.gguf"), None, n_ctx=256, n_threads=args.threads)
    model = runtime.target
    lone = Context(model, n_ctx=256, n_threads=args.threads)
    multi = MultiContext(model, n_seq=args.width, n_ctx=256, n_threads=args.threads, rollback=snapshots)
    try:
        prompts = [runtime.prompt([{"role": "user", "content": p}]).tokens for p in PROMPTS[: args.width]]
        plains = [plain_greedy(lone, p, args.max_tokens) for p in prompts]
        one_batch(multi, prompts, plains, "plain", args)  # warm-up
        rows = []
        runs = {m: Run() for m in ("plain", "kept", "rejected")}
        cuts = {m: {"in_place": 0.0, "restores": 0.0, "replayed": 0.0, "seconds": 0.0} for m in runs}
        for _ in range(args.repeats):
            for mode, run in runs.items():
                for s in multi.stats:
                    s.reset()
                got = one_batch(multi, prompts, plains, mode, args)
                run.tokens += got.tokens
                run.seconds += got.seconds
                run.rounds += got.rounds
                c = cuts[mode]
                c["in_place"] += sum(s.in_place for s in multi.stats)
                c["restores"] += sum(s.restores for s in multi.stats)
                c["replayed"] += sum(s.replayed_tokens for s in multi.stats)
                c["seconds"] += sum(s.seconds for s in multi.stats)
        for mode in ("kept", "rejected"):
            rows.append((mode, runs["plain"], runs[mode], cuts[mode]))
        return multi.rollback_depth, rows
    finally:
        multi.close()
        lone.close()
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=4, help="replies decoding together (at most 4 prompts)")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1 suits these tiny models)")
    parser.add_argument("--no-snapshots", action="store_true", help="also run qwen35 and lfm2 without snapshots")
    args = parser.parse_args()
    args.width = min(args.width, len(PROMPTS))

    print(
        f"{args.width} replies at once, depth {args.depth}, {args.max_tokens} tokens each x {args.repeats}, "
        f"{args.threads} thread(s); tok/s of the whole batch (prompts included)"
    )
    header = (
        f"{'model':14} {'snapshots':>9} {'drafts':9} {'plain':>8} {'spec':>8} {'ratio':>6} "
        f"{'rounds':>6} {'in place':>8} {'restored':>8} {'replayed':>8} {'ms/round':>8}"
    )
    print(header)
    print("-" * len(header))
    cases = [(arch, MAX_DEPTH) for arch in ARCHS]
    if args.no_snapshots:
        cases += [(arch, 0) for arch in ("qwen35", "lfm2")]
    for arch, snapshots in cases:
        granted, rows = measure(arch, snapshots, args)
        for mode, plain, spec, cuts in rows:
            per_round = 1000 * cuts["seconds"] / max(spec.rounds, 1)
            print(
                f"{arch:14} {granted:9d} {mode:9} {plain.rate:8.0f} {spec.rate:8.0f} {spec.rate / plain.rate:6.2f} "
                f"{spec.rounds:6d} {cuts['in_place']:8.0f} {cuts['restores']:8.0f} {cuts['replayed']:8.0f} "
                f"{per_round:8.3f}"
            )


if __name__ == "__main__":
    main()
