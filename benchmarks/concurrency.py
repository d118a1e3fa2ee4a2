"""Several clients at once against ``specchat serve``: one request at a time (``--parallel 1``) against batched.

Each configuration is its own server (started here, ``--port 0``; all at once,
run in turn with who goes first rotating, so a change in the machine's load
falls on every configuration alike, each run measured alone): for 1, 2 and 4
concurrent ``openai`` clients, ``--repeats`` runs each, every client sends its
share of the requests one after another (the mixed prompts of
``tests/data/mixed-prompts.jsonl`` in turn, each client starting at its own
offset), greedy, ``max_tokens`` 64, streaming, after every prompt was sent
once to warm the server (``--parallel 1`` keeps earlier prompts in its prompt
cache; a batched server keeps one per sequence). Per run: the aggregate
completion tokens per second (all completion tokens over the run's wall time),
each request's end-to-end latency (median and worst) and time to its first
token (median). Greedy texts of a batched configuration are compared with the
same drafter's ``--parallel 1`` texts (a difference there can be a float tie:
the batch changes the order of the sums).

With ``--drafters`` (registry names; ``ngram none`` unless told) each drafter
is one configuration at ``--parallel 1`` and one batched; ``draft`` drafts
with the pair's draft model (``--draft D.gguf``, or the demo pair's), which
the batched server shares among its sequences.

    python benchmarks/concurrency.py [--demo | --target T.gguf [--draft D.gguf]] [--parallel 4] \
        [--drafters ngram none draft] [--requests 8] [--clients 1 2 4] [--repeats 2] [--max-tokens 64] \
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

PROMPTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "mixed-prompts.jsonl"
LABELS = {"ngram": "lookup", "none": "plain", "draft": "draft model"}


@dataclass
class Result:
    prompt_id: str
    tokens: int
    latency: float
    first_token: float
    text: str


@dataclass
class Run:
    config: str
    clients: int
    wall: float
    results: list[Result] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        latencies = [r.latency for r in self.results]
        tokens = sum(r.tokens for r in self.results)
        return {
            "config": self.config,
            "clients": self.clients,
            "requests": len(self.results),
            "completion_tokens": tokens,
            "tokens_per_second": round(tokens / self.wall, 2),
            "latency_median": round(statistics.median(latencies), 3),
            "latency_worst": round(max(latencies), 3),
            "first_token_median": round(statistics.median(r.first_token for r in self.results), 3),
        }


@contextmanager
def server(model_args: list[str], extra: list[str]) -> Iterator[str]:
    """``specchat serve`` on a free port; its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specchat", "serve", "--port", "0", *model_args, *extra],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ},
    )
    assert proc.stderr is not None
    said = []
    url = None
    for line in proc.stderr:
        said.append(line)
        if "specchat serve: http" in line:
            url = line.split()[2]
            break
    if url is None:
        proc.kill()
        raise SystemExit("".join(said))
    drain = threading.Thread(target=proc.stderr.read, daemon=True)  # keep its pipe from filling
    drain.start()
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=120)


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


def run_clients(url: str, config: str, prompts: list[dict[str, Any]], clients: int, requests: int, n: int) -> Run:
    per_client = [requests // clients + (1 if i < requests % clients else 0) for i in range(clients)]
    results: list[Result] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
        try:
            for j in range(per_client[i]):
                prompt = prompts[(i * 3 + j) % len(prompts)]
                result = one_request(api, prompt, n)
                with lock:
                    results.append(result)
        finally:
            api.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Run(config, clients, time.perf_counter() - started, results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="the demo pair (the default without --target)")
    parser.add_argument("--target")
    parser.add_argument("--draft", help="a draft model for the draft drafter (with --target)")
    parser.add_argument("--drafters", nargs="+", default=["ngram", "none"], help="registry names: ngram none draft")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--requests", type=int, default=8, help="requests per run (shared among the clients)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration and client count")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--json")
    args = parser.parse_args()
    model_args = ["--target", args.target] if args.target else ["--demo"]
    if args.target and args.draft:
        model_args += ["--draft", args.draft]
    model_args += ["--ctx", str(args.ctx), "--probe-tokens", "0", "--queue", "64"]
    prompts = [json.loads(line) for line in PROMPTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    configs: dict[str, list[str]] = {}
    for parallel in (1, args.parallel):
        for drafter in args.drafters:
            extra = ["--drafter", drafter] + (["--parallel", str(parallel)] if parallel > 1 else [])
            configs[f"{LABELS.get(drafter, drafter)}, --parallel {parallel}"] = extra
    runs: dict[tuple[str, int], Run] = {}
    with ExitStack() as stack:
        urls = {config: stack.enter_context(server(model_args, extra)) for config, extra in configs.items()}
        for url in urls.values():
            warm = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
            for prompt in prompts:  # every prompt read once before the runs, as far as the caches keep them
                one_request(warm, prompt, 4)
            warm.close()
        names = list(configs)
        for clients in args.clients:
            for repeat in range(args.repeats):
                shift = (repeat + clients) % len(names)
                for config in names[shift:] + names[:shift]:  # who goes first rotates: the load falls on all
                    run = run_clients(urls[config], config, prompts, clients, args.requests, args.max_tokens)
                    total = runs.setdefault((config, clients), Run(config, clients, 0.0))
                    total.wall += run.wall
                    total.results += run.results
                    print(json.dumps(run.summary()), flush=True)
    ordered = [runs[(config, clients)] for config in configs for clients in args.clients]
    print()
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs; {time.ctime()}")
    print("| configuration | clients | tok/s (all) | latency median | worst | first token median |")
    print("|---|---|---|---|---|---|")
    for run in ordered:
        s = run.summary()
        print(
            f"| {s['config']} | {s['clients']} | {s['tokens_per_second']} | {s['latency_median']} s "
            f"| {s['latency_worst']} s | {s['first_token_median']} s |"
        )
    alone: dict[tuple[str, str], str] = {}  # (drafter, prompt id) -> the --parallel 1 text
    for run in ordered:
        if run.config.endswith("--parallel 1"):
            for r in run.results:
                alone.setdefault((run.config.split(",")[0], r.prompt_id), r.text)
    same = differ = 0
    for run in ordered:
        if not run.config.endswith("--parallel 1"):
            for r in run.results:
                text = alone.get((run.config.split(",")[0], r.prompt_id))
                same += text == r.text
                differ += text is not None and text != r.text
    print(f"\nbatched greedy texts equal to --parallel 1's: {same} of {same + differ}")
    if args.json:
        Path(args.json).write_text(json.dumps([r.summary() for r in ordered], indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
