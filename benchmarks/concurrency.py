"""Several clients at once: ``specchat serve --parallel N`` against ``llama-server -np N``, same models, same N.

For each client count N (1, 2, 4 and 8 by default) every chosen configuration
gets its own server with N slots (``--parallel N``; llama-server ``-np N`` with
``-c`` of N times ``--ctx``, as its context is shared among the slots), all
started at once, same thread count, on the CPU; the runs take turns, rotating
who goes first, so a change in the machine's load falls on every configuration
alike, each run measured alone. Configurations: specchat lookup and plain
batched (``specchat-lookup``, ``specchat-plain``, and on request ``specchat-draft``, the pair's
draft model shared by the batch, and ``specchat-auto``, Automatic in the batch; ``-p1`` for ``--parallel 1``),
llama-server plain, ``--spec-type draft-simple`` (the demo draft as its draft
model) and ``--spec-type ngram-mod``.

Workloads: ``mixed`` (the prompts of ``tests/data/mixed-prompts.jsonl`` in turn,
``--requests`` per run shared among the clients, each client starting at its
own offset) and ``agent`` (the agent session of
``benchmarks/server_vs_llama_server.py``: each client edits the same 150-line
file over ``--turns`` turns, each its own edit, resending its growing
conversation with its own replies). Greedy, streaming ``openai`` clients, after
one warm-up request per prompt (the mixed prompts; the session's first turn).
Per run: the aggregate completion tokens per second (all completion tokens over
the run's wall time), each request's end-to-end latency (median and worst) and
time to its first token (median). Then issue 41's goals at each N: specchat's
best aggregate rate at least 1.2x llama-server's best, its median latency no
worse, and speculation at least 0.98x specchat's plain batched decoding.

    python benchmarks/concurrency.py [--clients 1 2 4 8] [--workload mixed agent] [--configs ...] \
        [--requests 8] [--turns 3] [--repeats 1] [--max-tokens 64] [--threads 2] [--json out.json]

On a machine busy with other work, run it under ``OMP_WAIT_POLICY=PASSIVE`` (every server inherits it:
both engines' threads then sleep at their barriers instead of spinning against the other processes;
docs/benchmarks.md, "llama.cpp's waiting threads"). Ctrl-C ends the measuring and prints the tables of
the runs done so far.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_vs_llama_server as peer  # a sibling script: benchmarks/ is not a package

PROMPTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "mixed-prompts.jsonl"
SPECCHAT = {
    "specchat-lookup": ["--drafter", "ngram"],
    "specchat-plain": ["--drafter", "none"],
    "specchat-lookup-p1": ["--drafter", "ngram"],
    "specchat-plain-p1": ["--drafter", "none"],
    "specchat-draft": ["--drafter", "draft"],  # the pair's draft model, shared by the batch's sequences
    "specchat-draft-p1": ["--drafter", "draft"],
    "specchat-auto": ["--drafter", "composite"],  # Automatic: per sequence and round, lookup or the shared model
    "specchat-auto-p1": ["--drafter", "composite"],
}
LLAMA = {name: peer.LLAMA[name] for name in ("llama-plain", "llama-draft-simple", "llama-ngram-mod")}
DEFAULT_CONFIGS = ["specchat-lookup", "specchat-plain", "llama-plain", "llama-draft-simple", "llama-ngram-mod"]


@dataclass
class Result:
    prompt_id: str
    tokens: int
    latency: float
    first_token: float
    text: str


@dataclass
class Run:
    workload: str
    config: str
    clients: int
    wall: float
    results: list[Result] = field(default_factory=list)
    load: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        latencies = [r.latency for r in self.results]
        tokens = sum(r.tokens for r in self.results)
        return {
            "workload": self.workload,
            "config": self.config,
            "clients": self.clients,
            "requests": len(self.results),
            "completion_tokens": tokens,
            "tokens_per_second": round(tokens / self.wall, 2),
            "latency_median": round(statistics.median(latencies), 3),
            "latency_worst": round(max(latencies), 3),
            "first_token_median": round(statistics.median(r.first_token for r in self.results), 3),
            "load_average": [round(x, 2) for x in self.load],
        }


def one_request(api: openai.OpenAI, prompt: dict[str, Any], max_tokens: int) -> Result:
    started = time.perf_counter()
    first = None
    text = []
    tokens = 0
    for chunk in api.chat.completions.create(
        model="m",
        messages=prompt["messages"],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = time.perf_counter() - started
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    latency = time.perf_counter() - started
    return Result(prompt["id"], tokens, latency, first if first is not None else latency, "".join(text))


def in_threads(clients: int, client: Callable[[int], None]) -> float:
    """Run ``client(i)`` for each of ``clients`` threads at once; the wall time until the last one ends."""
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # in steps: a join without a timeout would not see Ctrl-C that another thread caught
            t.join(0.5)
    return time.perf_counter() - started


def run_mixed(url: str, config: str, prompts: list[dict[str, Any]], clients: int, requests: int, n: int) -> Run:
    """``requests`` mixed prompts shared among ``clients`` clients, each sending its share one after another."""
    per_client = [requests // clients + (1 if i < requests % clients else 0) for i in range(clients)]
    run = Run("mixed", config, clients, 0.0)
    lock = threading.Lock()

    def client(i: int) -> None:
        api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
        try:
            for j in range(per_client[i]):
                result = one_request(api, prompts[(i * 3 + j) % len(prompts)], n)
                with lock:
                    run.results.append(result)
        finally:
            api.close()

    run.wall = in_threads(clients, client)
    return run


def agent_turn(conversation: list[dict[str, str]], client: int, turn: int, source: str) -> dict[str, Any]:
    """The next request of ``client``'s agent session: its conversation with this turn's edit appended."""
    conversation.append({"role": "user", "content": peer.edit_request(turn, client + turn, source)})
    return {"id": f"agent-c{client}-t{turn + 1}", "messages": conversation}


def run_agent(url: str, config: str, clients: int, turns: int, n: int) -> Run:
    """``clients`` agent sessions at once, ``turns`` requests each, every reply kept in its conversation."""
    source = peer.file_150()
    run = Run("agent", config, clients, 0.0)
    lock = threading.Lock()

    def client(i: int) -> None:
        api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
        conversation = [{"role": "system", "content": peer.AGENT_SYSTEM}]
        try:
            for turn in range(turns):
                result = one_request(api, agent_turn(conversation, i, turn, source), n)
                conversation.append({"role": "assistant", "content": result.text})
                with lock:
                    run.results.append(result)
        finally:
            api.close()

    run.wall = in_threads(clients, client)
    return run


def command(name: str, slots: int, port: int, pair: Any, binary: Path, args: argparse.Namespace) -> list[str]:
    """The command line of configuration ``name`` with ``slots`` parallel slots."""
    if name in SPECCHAT:
        parallel = 1 if name.endswith("-p1") else slots
        extra = [*SPECCHAT[name], "--parallel", str(parallel), "--queue", "64"]
        return peer.serve_command(pair.target, pair.draft, port, args.ctx, args.threads, extra)
    draft = pair.draft if "draft" in name else None
    return peer.llama_command(binary, pair.target, draft, port, args.ctx, args.threads, slots, LLAMA[name])


def goals(runs: dict[tuple[str, str, int], Run], workloads: list[str], client_counts: list[int]) -> list[str]:
    """Issue 41's goals at each N, as table rows: where a side is missing from the run, its cell says so."""
    rows = []
    for workload in workloads:
        for n in client_counts:
            s = {c: r.summary() for (w, c, k), r in runs.items() if w == workload and k == n}
            ours = [c for c in s if c in ("specchat-lookup", "specchat-plain", "specchat-draft", "specchat-auto")]
            theirs = [c for c in s if c in LLAMA]
            rate_cell = latency_cell = spec_cell = "not run"
            if ours and theirs:
                best = max(ours, key=lambda c: s[c]["tokens_per_second"])
                rival = max(theirs, key=lambda c: s[c]["tokens_per_second"])
                ratio = s[best]["tokens_per_second"] / s[rival]["tokens_per_second"]
                rate_cell = (
                    f"{best} {s[best]['tokens_per_second']} / {rival} {s[rival]['tokens_per_second']} = "
                    f"{ratio:.2f}x: {'holds' if ratio >= 1.2 else 'does not hold'}"
                )
                ok = s[best]["latency_median"] <= s[rival]["latency_median"]
                latency_cell = (
                    f"{s[best]['latency_median']} s against {s[rival]['latency_median']} s: "
                    f"{'holds' if ok else 'does not hold'}"
                )
            speculating = [c for c in ("specchat-lookup", "specchat-auto", "specchat-draft") if c in s]
            if speculating and "specchat-plain" in s:
                plain = s["specchat-plain"]["tokens_per_second"]
                spec_cell = ", ".join(
                    f"{c.removeprefix('specchat-')} {s[c]['tokens_per_second'] / plain:.2f}x: "
                    f"{'holds' if s[c]['tokens_per_second'] / plain >= 0.98 else 'does not hold'}"
                    for c in speculating
                )
            rows.append(f"| {workload} | {n} | {rate_cell} | {latency_cell} | {spec_cell} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument(
        "--parallel", type=int, default=None, help="slots of every server (default: the run's client count)"
    )
    parser.add_argument("--workload", nargs="+", choices=["mixed", "agent"], default=["mixed", "agent"])
    parser.add_argument(
        "--configs", nargs="+", choices=[*SPECCHAT, *LLAMA], default=DEFAULT_CONFIGS, help="configurations to run"
    )
    parser.add_argument("--requests", type=int, default=8, help="mixed requests per run (shared among the clients)")
    parser.add_argument("--turns", type=int, default=3, help="requests per client in an agent run")
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration, workload and client count")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ctx", type=int, default=2048, help="context per slot")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="threads of every server")
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument("--json")
    args = parser.parse_args()
    if min(args.clients) < 1 or args.requests < 1 or args.turns < 1 or args.repeats < 1:
        parser.error("--clients, --requests, --turns and --repeats must be at least 1")

    from specchat.core.models.demo import provision_demo_pair

    pair = provision_demo_pair()
    needs_llama = any(name in LLAMA for name in args.configs)
    binary = (args.llama_server or peer.build_llama_server()) if needs_llama else Path()
    logs = peer.CACHE / "bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    prompts = [json.loads(line) for line in PROMPTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    names: list[str] = list(dict.fromkeys(args.configs))
    runs: dict[tuple[str, str, int], Run] = {}
    loads: list[float] = []
    try:  # Ctrl-C ends the measuring and reports the runs done so far
        for clients in args.clients:
            slots = args.parallel or clients
            servers: dict[str, peer.Server] = {}
            try:
                for name in names:
                    port = peer.free_port()
                    servers[name] = peer.start(
                        name, command(name, slots, port, pair, binary, args), port, logs / f"concurrency-{name}.log"
                    )
                for server in servers.values():
                    for prompt in prompts if "mixed" in args.workload else []:
                        one_request(server.api, prompt, 4)  # every prompt read once, as far as the caches keep them
                    if "agent" in args.workload:
                        conversation = [{"role": "system", "content": peer.AGENT_SYSTEM}]
                        one_request(server.api, agent_turn(conversation, 0, 0, peer.file_150()), 4)
                for workload in args.workload:
                    for repeat in range(args.repeats):
                        shift = (repeat + clients) % len(names)
                        for name in names[shift:] + names[:shift]:  # who goes first rotates: the load falls on all
                            url = servers[name].url + "/v1"
                            before = os.getloadavg()[0]
                            if workload == "mixed":
                                run = run_mixed(url, name, prompts, clients, args.requests, args.max_tokens)
                            else:
                                run = run_agent(url, name, clients, args.turns, args.max_tokens)
                            run.load = [before, os.getloadavg()[0]]
                            loads += run.load
                            total = runs.setdefault((workload, name, clients), Run(workload, name, clients, 0.0))
                            total.wall += run.wall
                            total.results += run.results
                            total.load += run.load
                            print(json.dumps(run.summary()), flush=True)
            finally:
                peer.stop_all(servers.values())
    except KeyboardInterrupt:
        print("interrupted: the tables below hold the runs done before", flush=True)
    ordered = [runs[(w, c, n)] for w in args.workload for c in names for n in args.clients if (w, c, n) in runs]
    print()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, threads {args.threads}; demo pair; greedy; "
        f"max tokens {args.max_tokens}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"1-minute load average during the runs {f'{min(loads):.1f}-{max(loads):.1f}' if loads else 'not taken'}"
    )
    print("| workload | configuration | clients | tok/s (all) | latency median | worst | first token median |")
    print("|---|---|---|---|---|---|---|")
    for run in ordered:
        s = run.summary()
        print(
            f"| {s['workload']} | {s['config']} | {s['clients']} | {s['tokens_per_second']} | "
            f"{s['latency_median']} s | {s['latency_worst']} s | {s['first_token_median']} s |"
        )
    print(
        "\n| workload | N | aggregate: specchat best / llama-server best (goal >= 1.2x) "
        "| median latency, the same two (goal: no worse) | each speculating / plain batched, specchat (goal >= 0.98x) |"
    )
    print("|---|---|---|---|---|")
    for row in goals(runs, args.workload, args.clients):
        print(row)
    if "specchat-plain" in names:
        plain: dict[str, str] = {}  # prompt id -> specchat plain's text (mixed prompts: the same at every N)
        for run in ordered:
            if run.workload == "mixed" and run.config == "specchat-plain":
                for r in run.results:
                    plain.setdefault(r.prompt_id, r.text)
        print("\nmixed prompts, greedy texts equal to specchat plain's:")
        for name in names:
            mine = [r for run in ordered if run.workload == "mixed" and run.config == name for r in run.results]
            same = sum(plain.get(r.prompt_id) == r.text for r in mine)
            print(f"  {name}: {same} of {len(mine)}")
    if args.json:
        Path(args.json).write_text(json.dumps([r.summary() for r in ordered], indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
