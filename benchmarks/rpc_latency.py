"""The demo target on remote devices: what the process boundary costs, and how speculation pays as latency grows.

Two parts, both on this machine:

1. ``boundary``: one verify round (decode ``[last] + 4 drafts`` with every
   row's logits, then cut back) on the target's context in this process and
   in the target's child process (local devices, no RPC), interleaved round
   by round; and, per round, the exchange's time minus the child's own work
   (what the pipe and the logits' copies cost, free of the rounds' noise).
2. ``latency``: ``specchat bench`` (plain and speculative decoding
   interleaved per prompt) with the target local, then fully remote on one
   ``specchat serve-rpc`` on 127.0.0.1, directly and through a forwarding
   proxy that delays each direction by 1, 5 and 20 ms.

Run with ``OMP_WAIT_POLICY=PASSIVE`` on a shared machine::

    OMP_WAIT_POLICY=PASSIVE python benchmarks/rpc_latency.py --out /tmp/rpc.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def boundary(target: Path, rounds: int, depth: int) -> dict[str, float]:
    """Median seconds per verify round: in this process and in the target's child process."""
    from specchat.core.llama.context import Context
    from specchat.core.llama.model import Model
    from specchat.core.llama.rpc.target import RemoteTarget

    model = Model(target)
    local = Context(model, n_ctx=1024)
    child = RemoteTarget(())
    child.load(target, n_ctx=1024)
    prompt = model.tokenize("The quick brown fox jumps over the lazy dog. " * 6, add_special=True)
    batch = prompt[-depth - 1 :]
    times: dict[str, list[float]] = {"in_process": [], "child": []}
    overheads: list[float] = []
    try:
        for ctx in (local, child):
            ctx.extend_to(prompt[: -depth - 1])
        for _ in range(rounds):
            for name, ctx in (("in_process", local), ("child", child)):
                n = len(ctx.tokens)
                started = time.perf_counter()
                ctx.prepare_rollback(depth)
                rows = ctx.decode(batch, all_logits=True)
                ctx.truncate(n)
                times[name].append(time.perf_counter() - started)
                if ctx is child:
                    overheads.append(child.last_overhead)  # the decode's exchange minus the child's own work
                assert rows.shape == (depth + 1, model.n_vocab)
        pings = []
        for _ in range(200):  # the exchange alone, without llama.cpp's work
            started = time.perf_counter()
            child._request(("ping",), 10.0)
            pings.append(time.perf_counter() - started)
    finally:
        child.close()
        local.close()
        model.close()
    inner, outer = statistics.median(times["in_process"]), statistics.median(times["child"])
    return {
        "rounds": rounds,
        "depth": depth,
        "logits_bytes": (depth + 1) * model.n_vocab * 4,
        "in_process_ms": round(inner * 1000, 2),
        "child_ms": round(outer * 1000, 2),
        "difference_ms": round((outer - inner) * 1000, 2),
        "exchange_overhead_ms": round(statistics.median(overheads) * 1000, 3),
        "exchange_overhead_p90_ms": round(sorted(overheads)[int(len(overheads) * 0.9)] * 1000, 3),
        "ping_ms": round(statistics.median(pings) * 1000, 3),
    }


class DelayProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream``, delaying each direction by ``delay`` seconds."""

    def __init__(self, upstream: int, delay: float) -> None:
        self.port = free_port()
        self.upstream, self.delay = upstream, delay
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def pump() -> None:
            while True:
                data = await reader.read(1 << 16)
                queue.put_nowait((self.loop.time() + self.delay, data))
                if not data:
                    return

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - self.loop.time()))
                if not data:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()

        await asyncio.gather(pump(), deliver(), return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))


def bench(
    target: Path, draft: Path, prompts: Path, limit: int, max_tokens: int, rpc: str | None, depth: str
) -> dict[str, object]:
    command = [
        sys.executable,
        "-m",
        "specchat",
        "bench",
        "--json",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompts",
        str(prompts),
        "--limit",
        str(limit),
        "--max-tokens",
        str(max_tokens),
        "--depth",
        depth,
    ]
    if rpc:
        command += ["--rpc", rpc, "--rpc-timeout", "600"]
    started = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"bench failed: {out.stderr.strip()}")
    data = json.loads(out.stdout)
    return {
        "plain_tok_s": data["baseline_tokens_per_s"],
        "spec_tok_s": data["speculative_tokens_per_s"],
        "speedup": data["speedup"],
        "acceptance": data["acceptance_rate"],
        "accepted_per_round": data["mean_accepted_per_round"],
        "identical": data["identical"],
        "wall_s": round(time.perf_counter() - started, 1),
    }


def latency(
    target: Path, draft: Path, prompts: Path, limit: int, max_tokens: int, delays: list[float], depth: str
) -> list[dict[str, object]]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "specchat", "serve-rpc", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        end = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)
        local = bench(target, draft, prompts, limit, max_tokens, None, depth)
        rows: list[dict[str, object]] = [{"where": "local", **local}]
        print(json.dumps(rows[-1]), flush=True)
        for delay in delays:
            upstream = port if delay == 0 else DelayProxy(port, delay / 1000).port
            result = bench(target, draft, prompts, limit, max_tokens, f"127.0.0.1:{upstream}", depth)
            rows.append({"where": f"remote, +{delay:g} ms each way", **result})
            print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        server.kill()
        server.wait()


def main() -> None:
    from specchat.core.models.demo import provision_demo_pair

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["boundary", "latency", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--delays", type=float, nargs="+", default=[0, 1, 5, 20], help="ms each way")
    parser.add_argument("--limit", type=int, default=2, help="prompts")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--depth", default="auto", help="draft depth for the latency part: a number or auto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    pair = provision_demo_pair()
    result: dict[str, object] = {
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if args.part in ("boundary", "both"):
        result["boundary"] = boundary(pair.target, args.rounds, 4)
        print(json.dumps(result["boundary"]), flush=True)
    if args.part in ("latency", "both"):
        result["latency"] = latency(
            pair.target,
            pair.draft,
            ROOT / "tests" / "data" / "prompts.jsonl",
            args.limit,
            args.max_tokens,
            args.delays,
            args.depth,
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
