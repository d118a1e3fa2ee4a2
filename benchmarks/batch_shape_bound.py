"""How far the target's logits move with the shape of the batches that read the same tokens.

llama.cpp reads a prompt in micro-batches of up to ``n_batch`` tokens, and
its kernels add in an order that depends on the batch: the same tokens read
in one call, in two calls (a prompt cache that restores a prefix, then reads
the rest), or one token per call (plain decoding) against a verify batch of
2-9 tokens (speculation) give logits that differ in the last bits. This
measures by how much, on the demo target (SmolLM2-135M-Instruct, F32) with
specchat's own ``Context``:

- each source's prompt is read in one call (the reference), then its greedy
  reply of ``--reply`` tokens is decoded one token per call;
- the prompt is read again cut in two (at 120 tokens, at half, before its last
  token) and in 64-token pieces, and each reading's last logits are compared
  with the reference's; after each reading (the one-call one too) the same
  reply is decoded one token per call and in verify batches of 2 to 9 tokens,
  and every reply position's logits are compared with the reference's;
- the same reading and reply in a context at each further ``--threads``
  count (one-token decodes on a long context depend on it).

Per row of logits, two figures over the reference row's largest |logit|:
*max |d|*, the largest change of one logit, and *gap shift*, the largest
change of the difference between any two logits (max d - min d). The gap
shift bounds how much the gap between the two best tokens can move, so it
is the figure a tie bound must cover. *min top-2* is the smallest gap
between the reference's two best tokens over the positions compared (over
the same scale), *flips* how many positions' argmax moved.

Sources: the prompts of ``--prompts`` (the shared public prompt sets) and
real documents cut to 1k, 2k, 3k and 4k tokens, each as a user message
asking for a summary: the repository's README.md and docs/architecture.md,
Python's own language reference (``pydoc_data.topics``) and the standard
library's argparse.py. Last, separately, a degenerate prompt: one token
repeated up to ``--degenerate`` tokens.

    python benchmarks/batch_shape_bound.py [--prompts A.jsonl B.jsonl] [--lengths 1024 2048 3072 4096]
        [--threads 1 2] [--documents README.md ...] [--reply 16] [--degenerate 4093] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specchat.core.llama.context import Context
    from specchat.core.runtime.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
SHARED_PROMPTS = ROOT.parent / "shared" / "prompts"
VERIFY_SIZES = tuple(range(2, 10))
PIECE = 64  # tokens per call in the "in pieces" reading: not a multiple of the 512-token micro-batch


@dataclass
class Diff:
    """The worst figures over some rows of logits compared with the reference's."""

    rel: float = 0.0  # largest |logit difference| over the reference row's largest |logit|
    shift: float = 0.0  # largest change of any two logits' difference, on the same scale
    top2: float = float("inf")  # smallest top-two gap of the reference rows, on the same scale
    flips: int = 0

    def add(self, got: np.ndarray, ref: np.ndarray) -> None:
        got = np.atleast_2d(np.asarray(got, dtype=np.float64))
        ref = np.atleast_2d(np.asarray(ref, dtype=np.float64))
        scale = np.abs(ref).max(axis=1)
        d = got - ref
        self.rel = max(self.rel, float((np.abs(d).max(axis=1) / scale).max()))
        self.shift = max(self.shift, float(((d.max(axis=1) - d.min(axis=1)) / scale).max()))
        two = np.sort(ref, axis=1)[:, -2:]
        self.top2 = min(self.top2, float(((two[:, 1] - two[:, 0]) / scale).min()))
        self.flips += int((got.argmax(axis=1) != ref.argmax(axis=1)).sum())

    def merge(self, other: Diff) -> None:
        self.rel, self.shift = max(self.rel, other.rel), max(self.shift, other.shift)
        self.top2, self.flips = min(self.top2, other.top2), self.flips + other.flips


def readings(n: int) -> list[tuple[str, list[int]]]:
    """Ways to read an ``n``-token prompt other than one call: (label, the calls' end positions).

    Pieces only up to 1,024 tokens: beyond, a reading costs minutes on two
    cores and the cuts already show the effect.
    """
    out = []
    if n > 120 + 1:
        out.append(("cut at 120", [120, n]))
    out.append((f"cut at {n // 2}", [n // 2, n]))
    out.append((f"cut at {n - 1}", [n - 1, n]))
    if PIECE < n <= 1024:
        out.append((f"{PIECE}-token pieces", [*range(PIECE, n, PIECE), n]))
    return out


def read(ctx: Context, prompt: Sequence[int], ends: Sequence[int]) -> np.ndarray:
    """Read ``prompt`` from an empty context in calls ending at ``ends``; the last logits."""
    ctx.truncate(0)
    start = 0
    row = None
    for end in ends:
        row = np.array(ctx.decode(list(prompt[start:end]))[0])
        start = end
    assert row is not None
    return row


def reply_rows(ctx: Context, reply: Sequence[int], size: int) -> np.ndarray:
    """The logits after each reply token, decoded in calls of ``size`` tokens after what ``ctx`` holds."""
    rows: list[np.ndarray] = []
    for i in range(0, len(reply), size):
        rows.extend(np.array(ctx.decode(list(reply[i : i + size]), all_logits=True)))
    return np.stack(rows)


def measure(
    ctx: Context, prompt: Sequence[int], n_reply: int, others: Sequence[tuple[str, Context]] = ()
) -> list[tuple[str, Diff, Diff, Diff]]:
    """Per reading: (label, its last logits, the reply one token per call, the reply in verify batches).

    ``others`` are contexts on the same model at other thread counts: each
    reads the prompt in one call and decodes the same reply, compared with
    ``ctx``'s.
    """
    n = len(prompt)
    head = read(ctx, prompt, [n])
    reply: list[int] = []
    rows = [head]
    for _ in range(n_reply):  # the reference: plain greedy decoding
        reply.append(int(np.argmax(rows[-1])))
        rows.append(np.array(ctx.decode([reply[-1]])[0]))
    reference = np.stack(rows[1:])
    out = []
    cases = [
        ("one call", ctx, [n]),
        *((label, ctx, ends) for label, ends in readings(n)),
        *((f"one call, {label}", other, [n]) for label, other in others),
    ]
    for label, context, ends in cases:
        last, singles, batches = Diff(), Diff(), Diff()
        last.add(read(context, prompt, ends), head)
        singles.add(reply_rows(context, reply, 1), reference)
        for size in VERIFY_SIZES:
            context.truncate(n)
            batches.add(reply_rows(context, reply, size), reference)
        context.truncate(0)
        out.append((label, last, singles, batches))
    return out


def documents() -> Iterator[tuple[str, str]]:
    """Real text available offline: (name, text)."""
    for rel in ("README.md", "docs/architecture.md"):
        path = ROOT / rel
        if path.is_file():
            yield rel, path.read_text(encoding="utf-8")
        else:
            print(f"(skipped {rel}: not found)")
    try:
        from pydoc_data.topics import topics
    except ImportError:
        print("(skipped Python's language reference: pydoc_data is not installed)")
    else:
        yield "Python reference", "\n\n".join(topics[k] for k in sorted(topics))
    import argparse as module

    if module.__file__ and Path(module.__file__).is_file():
        yield "argparse.py", Path(module.__file__).read_text(encoding="utf-8")


def document_prompt(runtime: Runtime, text: str, n_tokens: int) -> list[int] | None:
    """A chat prompt of about ``n_tokens`` (at most) asking for a summary of the start of ``text``."""

    def prompt(chars: int) -> list[int]:
        messages = [{"role": "user", "content": f"Summarise this document.\n\n{text[:chars]}"}]
        return runtime.target.tokenize(
            runtime.template.render(messages),
            add_special=True,
            parse_special=True,
        )

    if len(prompt(len(text))) < n_tokens:
        return None
    lo, hi = 0, len(text)  # the most characters whose prompt fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(prompt(mid)) <= n_tokens else (lo, mid - 1)
    return prompt(lo)


def fmt(x: float) -> str:
    return f"{x:9.2e}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = [SHARED_PROMPTS / "public.jsonl", SHARED_PROMPTS / "mixed-public.jsonl"]
    parser.add_argument(
        "--prompts",
        type=Path,
        nargs="*",
        default=None,
        help="prompt files (JSON lines with messages); default: the shared public sets",
    )
    parser.add_argument("--lengths", type=int, nargs="*", default=[1024, 2048, 3072, 4096])
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1, 2],
        help="the reference's thread count, then others compared with it (one call each)",
    )
    parser.add_argument("--documents", nargs="*", default=None, help="which documents (names as printed; default: all)")
    parser.add_argument("--reply", type=int, default=16, help="greedy reply tokens compared after each reading")
    parser.add_argument("--degenerate", type=int, default=4093, help="length of the repeated-token prompt (0: none)")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--quick", action="store_true", help="one document, the first length only")
    args = parser.parse_args()

    from specchat.cli.bench import load_prompts
    from specchat.core.engine.verify import TIE_RELATIVE_GAP
    from specchat.core.llama.context import Context
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.runtime.runtime import Runtime
    from specchat.core.types import SpecchatError

    paths = args.prompts
    if paths is None:
        paths = [p for p in defaults if p.is_file()]
        if not paths:
            fallback = ROOT / "tests" / "data" / "prompts.jsonl"
            print(f"(the shared public prompts are not at {SHARED_PROMPTS}; using {fallback.relative_to(ROOT)})")
            paths = [fallback]
    try:
        prompts = [p for path in paths for p in load_prompts(path, None)]
    except SpecchatError as exc:
        print(f"batch_shape_bound: {exc}", file=sys.stderr)
        return 2
    longest = max([*args.lengths, args.degenerate]) + args.reply + 1
    if longest > args.n_ctx:
        print(f"batch_shape_bound: --n-ctx {args.n_ctx} is too small for {longest} tokens", file=sys.stderr)
        return 2

    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, None, n_ctx=args.n_ctx, n_threads=args.threads[0])
    ctx = runtime.target_context
    assert isinstance(ctx, Context)  # loaded here, never a remote target
    others = [(f"{t} threads", Context(runtime.target, n_ctx=args.n_ctx, n_threads=t)) for t in args.threads[1:]]
    print(
        f"demo target {pair.target.name}, {ctx.n_ctx}-token context, n_batch {ctx.n_batch}, "
        f"{args.threads[0]} threads, reply {args.reply} tokens, verify batches "
        f"{VERIFY_SIZES[0]}-{VERIFY_SIZES[-1]}"
    )
    print(
        "figures over the reference row's largest |logit|; max |d|: one logit's change; gap shift: the largest "
        "change of a difference of two logits"
    )
    header = (
        f"{'source':<22}{'tokens':>7}  {'reading':<18}{'last: max|d|':>13}{'gap shift':>10}"
        f"{'reply 1/call':>13}{'verify 2-9':>11}{'min top-2':>10}{'flips':>6}"
    )
    print(header)
    worst: dict[str, Diff] = {"public prompts": Diff(), "documents": Diff(), "other thread counts": Diff()}

    def report(group: str, name: str, tokens: list[int]) -> None:
        for label, last, singles, batches in measure(ctx, tokens, args.reply, others):
            every = Diff()
            for d in (last, singles, batches):
                every.merge(d)
            worst["other thread counts" if "threads" in label else group].merge(every)
            print(
                f"{name:<22}{len(tokens):>7}  {label:<18}{fmt(last.rel):>13}{fmt(last.shift):>10}"
                f"{fmt(singles.shift):>13}{fmt(batches.shift):>11}{fmt(every.top2):>10}{every.flips:>6}",
                flush=True,
            )

    for pid, messages in prompts:
        tokens = runtime.prompt(messages).tokens
        report("public prompts", pid, tokens)
    docs = [d for d in documents() if args.documents is None or d[0] in args.documents]
    docs = docs[:1] if args.quick else docs
    lengths = args.lengths[:1] if args.quick else args.lengths
    for name, text in docs:
        for n in lengths:
            document = document_prompt(runtime, text, n)
            if document is None:
                print(f"{name:<22}{n:>7}  (shorter than {n} tokens: skipped)")
                continue
            report("documents", name, document)

    print()
    for group, d in worst.items():
        print(f"{group}: largest max |d| {d.rel:.2e}, largest gap shift {d.shift:.2e}, argmax flips {d.flips}")
    real = max(d.shift for d in worst.values())
    verdict = "within" if real < TIE_RELATIVE_GAP else "ABOVE"
    print(f"real text: largest gap shift {real:.2e}, {verdict} the tie bound TIE_RELATIVE_GAP = {TIE_RELATIVE_GAP:g}")

    if args.degenerate:
        token = runtime.target.tokenize(" the")[-1]
        tokens = [token] * args.degenerate
        print(
            f"\ndegenerate: token {token} ({runtime.target.token_text(token)!r}) repeated {args.degenerate} times, "
            "no template"
        )
        print(header)
        for label, last, singles, batches in measure(ctx, tokens, args.reply):
            every = Diff()
            for d in (last, singles, batches):
                every.merge(d)
            print(
                f"{'repeated token':<22}{len(tokens):>7}  {label:<18}{fmt(last.rel):>13}{fmt(last.shift):>10}"
                f"{fmt(singles.shift):>13}{fmt(batches.shift):>11}{fmt(every.top2):>10}{every.flips:>6}",
                flush=True,
            )
    for _, other in others:
        other.close()
    runtime.close()
    return 0 if real < TIE_RELATIVE_GAP else 1


if __name__ == "__main__":
    sys.exit(main())
