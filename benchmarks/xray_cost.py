"""What the token X-ray costs: time per round on the demo pair, the top-5 alone, and the bytes stored.

The engine's top-5 lists (``verify.top``), their token texts and the spans'
details are timed inside real replies (greedy with the window's sampler, and
T=0.8), as a share of the generation time; ``top`` alone is timed on
distributions over the demo vocabulary, truncated by the default sampler and
untruncated; the replies are stored in a temporary SQLite file and the
details' bytes per span counted.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/xray_cost.py [--max-tokens 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import specchat.core.chat.transcript as transcript
import specchat.core.engine.speculative as speculative
import specchat.core.engine.verify as verify
from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.sampling import distribution
from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, Finished, GenerationParams, SamplerParams, Verified

PROMPTS = (
    "Explain how a bicycle works, step by step.",
    "Write a Python function that checks whether a number is prime, with a docstring and two examples.",
    "Tell me a short story about a lighthouse keeper who finds a message in a bottle.",
)
SPENT: dict[str, float] = {"top": 0.0, "texts": 0.0, "details": 0.0}
TOP = verify.top  # the function itself, also for timing it alone once the engine's uses are wrapped


def _timed(key: str, f: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            SPENT[key] += time.perf_counter() - started

    return timed


def top_alone(n_vocab: int) -> None:
    rows = [np.random.default_rng(i).standard_normal(n_vocab).astype(np.float32) * 3 for i in range(9)]
    for label, sampler in (
        ("default sampler", SamplerParams()),
        ("untruncated (top-k 0, min-p 0, top-p 1)", SamplerParams(top_k=0, min_p=0.0, top_p=1.0)),
    ):
        dists = [distribution(r, [], sampler) for r in rows]
        n = 200
        started = time.perf_counter()
        for _ in range(n):
            for d in dists:
                TOP(d)
        top_s = (time.perf_counter() - started) / n
        started = time.perf_counter()
        for _ in range(n):
            for r in rows:
                distribution(r, [], sampler)
        dist_s = (time.perf_counter() - started) / n
        print(
            f"top-5 alone, {label} (support {len(dists[0].ids)}): {top_s * 1e3:.3f} ms for the 9 lists of a "
            f"depth-4 round; the 9 distributions themselves {dist_s * 1e3:.3f} ms"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=200)
    args = parser.parse_args()
    # Every engine module that calls ``top`` (verify itself, the reply loop, each drafter's module) holds its
    # own name for it: wrap each one, so that a drafter moved to a module of its own is still timed.
    timed_top = _timed("top", TOP)
    for module in list(sys.modules.values()):
        if module.__name__.startswith("specchat.") and getattr(module, "top", None) is TOP:
            vars(module)["top"] = timed_top
    speculative._Reply._named = _timed("texts", speculative._Reply._named)  # type: ignore[method-assign]
    transcript._details = _timed("details", transcript._details)

    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, pair.draft, n_ctx=4096)
    store = ConversationStore(Path(tempfile.mkdtemp(prefix="specchat-xray-")) / "c.sqlite3")
    try:
        for label, sampler in (
            ("greedy, repeat penalty 1.1", SamplerParams(repeat_penalty=1.1)),
            ("T=0.8", SamplerParams(temperature=0.8)),
        ):
            for key in SPENT:
                SPENT[key] = 0.0
            rounds = generated = 0
            seconds = 0.0
            for prompt in PROMPTS:
                cid = store.create_conversation("q")
                store.add_message(cid, "user", prompt)
                writer = ReplyWriter(store, cid)
                params = GenerationParams(sampler=sampler, max_tokens=args.max_tokens, seed=1)
                for event in Conversation(runtime).reply(
                    prompt, params, drafter=DrafterKind.DRAFT_MODEL, depth=DepthControl(None)
                ):
                    writer.feed(event)
                    rounds += isinstance(event, Verified)
                    if isinstance(event, Finished):
                        generated += event.stats.generated
                        seconds += event.stats.generate_seconds
            extra = sum(SPENT.values())
            print(
                f"{label}: {rounds} rounds, {generated} tokens in {seconds:.2f} s; X-ray data "
                f"{extra / rounds * 1e3:.3f} ms a round (top {SPENT['top'] * 1e3:.1f} ms, texts "
                f"{SPENT['texts'] * 1e3:.1f} ms, details {SPENT['details'] * 1e3:.1f} ms in all) = "
                f"{extra / seconds:.2%} of the generation time"
            )
        spans, size = store._db.execute(
            "SELECT count(*), sum(length(CAST(detail AS BLOB))) FROM spans WHERE detail IS NOT NULL"
        ).fetchone()
        tokens = sum(
            int(r[0])
            for r in store._db.execute(
                "SELECT json_extract(stats, '$.generated') FROM messages WHERE role = 'assistant'"
            )
        )
        print(
            f"stored: {spans} spans with details, {size} bytes: {size / spans:.0f} bytes a span, "
            f"{size / tokens * 500 / 1024:.0f} KiB per 500 generated tokens"
        )
        top_alone(runtime.target.n_vocab)
    finally:
        store.close()
        runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
