"""``specchat serve`` against llama.cpp's ``llama-server``: the same ``openai`` client workload, same models.

Workload: the public mixed prompts (one request each) and an agent-like session
that asks for five successive edits of a 150-line file, resending the growing
conversation each time. Every server runs at once, one slot each, and each
request goes to all of them in turn (rotating who goes first), so load on the
machine falls on every configuration alike. Greedy (temperature 0, seed 0).

Configurations: specchat (its default drafter) and specchat plain; llama-server
with ``--spec-type draft-simple``, ``ngram-mod``, ``ngram-mod,draft-simple`` and
plain. Per request: time to first token (first content chunk) and tokens per
second (completion tokens over the time from the first to the last chunk);
per category and overall: the median TTFT and total tokens over total time,
then the same tokens over the whole requests' time (first token included: what
a client waits for).
Greedy texts are compared with the same engine's plain run, and specchat's with
llama-server's. ``--repeats N`` sends each mixed prompt N times per configuration
(rotating again): a 15-token reply is a handful of chunks, and one run of it moves
by tens of percent with whatever else the machine does.

    python benchmarks/server_vs_llama_server.py [--llama-server PATH] [--ids m-copy m-code-edit] \
        [--max-tokens 128] [--edit-tokens 256] [--repeats 3] [--json out.json]

Without ``--llama-server`` it uses ~/.cache/specchat-llama-tools/build/bin/llama-server, building it there
first (from the llama.cpp vendored in the llama-cpp-python sdist) when it is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import httpx
import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

CACHE = Path.home() / ".cache" / "specchat-llama-tools"
# The shared prompts sit beside the repository (../shared/prompts), wherever it is checked out.
PROMPTS = Path(__file__).resolve().parents[1].parent / "shared" / "prompts" / "mixed-public.jsonl"
SPECCHAT = {"specchat": [], "specchat-plain": ["--drafter", "none"]}
LLAMA = {
    "llama-plain": [],
    "llama-draft-simple": ["--spec-type", "draft-simple"],
    "llama-ngram-mod": ["--spec-type", "ngram-mod"],
    "llama-ngram-mod+draft": ["--spec-type", "ngram-mod,draft-simple"],
}


def build_llama_server(cache: Path = CACHE) -> Path:
    """llama-server from the llama.cpp vendored in this llama-cpp-python's sdist, built under ``cache``."""
    binary = cache / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    sdist_dir = cache / "sdist"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    wanted = f"llama-cpp-python=={version('llama-cpp-python')}"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(sdist_dir), wanted],
        check=True,
    )
    archive = next(sdist_dir.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(sdist_dir, filter="data")
    source = next(sdist_dir.glob("llama_cpp_python-*/vendor/llama.cpp"))
    subprocess.run(
        [
            "cmake",
            "-S",
            str(source),
            "-B",
            str(cache / "build"),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_BUILD_SERVER=ON",
            "-DLLAMA_CURL=OFF",
        ],
        check=True,
    )
    subprocess.run(
        ["cmake", "--build", str(cache / "build"), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
        check=True,
    )
    return binary


def serve_command(target: Path, draft: Path, port: int, ctx: int, threads: int, extra: Sequence[str] = ()) -> list[str]:
    """``specchat serve`` on the pair at ``port``, on the CPU, without the start-up probe (as llama-server)."""
    return [
        sys.executable,
        "-m",
        "specchat",
        "serve",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--port",
        str(port),
        "--ctx",
        str(ctx),
        "--threads",
        str(threads),
        "--probe-tokens",
        "0",
        "--n-gpu-layers",
        "0",
        "--draft-gpu-layers",
        "0",
        *extra,
    ]


def llama_command(
    binary: Path,
    target: Path,
    draft: Path | None,
    port: int,
    ctx: int,
    threads: int,
    slots: int,
    extra: Sequence[str] = (),
) -> list[str]:
    """``llama-server`` on the target (and ``draft`` as its draft model) at ``port``, on the CPU, with ``slots``
    parallel slots sharing a context of ``ctx`` tokens each (its ``-c`` is shared among the slots)."""
    return [
        str(binary),
        "-m",
        str(target),
        *(["-md", str(draft)] if draft is not None else []),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "-c",
        str(ctx * slots),
        "-np",
        str(slots),
        "-t",
        str(threads),
        "-ngl",
        "0",
        "-ngld",
        "0",
        "--no-webui",
        "--seed",
        "0",
        *extra,
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    api: openai.OpenAI = field(init=False)

    def __post_init__(self) -> None:
        self.api = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=3600)


def start(name: str, command: list[str], port: int, log: Path) -> Server:
    proc = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return Server(name, proc, url)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{name} did not start; see {log}")


def stop_all(servers: Iterable[Server]) -> None:
    """Terminate every server, then wait for each (killing one that takes more than 30 s)."""
    servers = list(servers)
    for server in servers:
        server.proc.terminate()
    for server in servers:
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()


@dataclass
class Streamed:
    """A streamed reply as a client sees it: its text, its chunks with content, when the first and last of them
    came (seconds from sending) and the usage the server reported (None without one)."""

    text: str
    pieces: int
    first: float
    last: float
    usage: CompletionUsage | None


def read_stream(chunks: Iterable[ChatCompletionChunk], started: float) -> Streamed:
    """Read a streamed chat completion sent at ``started`` (``time.perf_counter()``)."""
    first = last = 0.0
    text: list[str] = []
    usage = None
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter() - started
            first = first or now
            last = now
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    return Streamed("".join(text), len(text), first, last, usage)


def run_request(server: Server, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    started = time.perf_counter()
    reply = read_stream(
        server.api.chat.completions.create(
            model="m",
            messages=cast("list[ChatCompletionMessageParam]", messages),  # the prompt file's plain JSON messages
            max_tokens=max_tokens,
            temperature=0,
            seed=0,
            stream=True,
            stream_options={"include_usage": True},
        ),
        started,
    )
    tokens = reply.usage.completion_tokens if reply.usage is not None else reply.pieces
    return {"ttft": reply.first, "seconds": reply.last - reply.first, "tokens": tokens, "text": reply.text}


def file_150() -> str:
    """A 150-line Python module to edit."""
    lines = ['"""Inventory bookkeeping for a small shop."""', "", "from dataclasses import dataclass", ""]
    for i in range(12):
        lines += [
            "",
            "@dataclass",
            f"class Item{i}:",
            f"    name: str = 'item{i}'",
            f"    price: float = {i + 1}.5",
            f"    stock: int = {i * 3}",
            "",
            "    def value(self) -> float:",
            "        return self.price * self.stock",
            "",
            "    def restock(self, n: int) -> None:",
            "        self.stock += n",
        ]
    while len(lines) < 150:
        lines.append(f"TOTAL_{len(lines)} = {len(lines) * 7}")
    return "\n".join(lines[:150]) + "\n"


EDITS = [
    "Rename the method restock to refill everywhere.",
    "Make every price a Decimal instead of a float.",
    "Add a docstring to every value method.",
    "Change every stock default to 10.",
    "Rename the module docstring to 'Stock keeping for a small shop.'",
]
AGENT_SYSTEM = "You edit code. Reply with the whole edited file in one code block and nothing else."


def edit_request(turn: int, edit: int, source: str) -> str:
    """The agent session's user message for ``turn`` asking for ``EDITS[edit]``: the first carries the file."""
    ask = EDITS[edit % len(EDITS)]
    return f"Here is shop.py:\n```python\n{source}```\n{ask}" if turn == 0 else ask


def workload(ids: list[str] | None) -> list[tuple[str, str, list[dict[str, str]]]]:
    """(category, id, messages) for the mixed prompts; the agent session is driven separately."""
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    return [(r["id"].removeprefix("m-"), r["id"], r["messages"]) for r in rows if not ids or r["id"] in ids]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument("--ids", nargs="*", default=None, help="mixed prompt ids to run (default: all)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--edit-tokens", type=int, default=256, help="tokens per reply in the agent session")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each mixed prompt per configuration (short replies are noisy: take 3 or more)",
    )
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--configs", nargs="*", default=None, help="subset of configurations")
    args = parser.parse_args()

    from specchat.core.models.demo import provision_demo_pair

    pair = provision_demo_pair()
    binary = args.llama_server or build_llama_server()
    logs = CACHE / "bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    commands: dict[str, tuple[list[str], int]] = {}
    for name, extra in SPECCHAT.items():
        port = free_port()
        commands[name] = (serve_command(pair.target, pair.draft, port, args.ctx, args.threads, extra), port)
    for name, extra in LLAMA.items():
        port = free_port()
        draft = pair.draft if "draft" in name else None
        commands[name] = (llama_command(binary, pair.target, draft, port, args.ctx, args.threads, 1, extra), port)
    names = [n for n in commands if not args.configs or n in args.configs]
    servers: dict[str, Server] = {}
    try:
        for name in names:
            command, port = commands[name]
            servers[name] = start(name, command, port, logs / f"{name}.log")
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        jobs = workload(args.ids) * max(1, args.repeats)
        for n, (category, rid, messages) in enumerate(jobs):
            order = names[n % len(names) :] + names[: n % len(names)]
            for name in order:
                r = run_request(servers[name], messages, args.max_tokens)
                results[name].append({"category": category, "id": rid, **r})
            print(f"{rid}: " + ", ".join(f"{name} {results[name][-1]['tokens']}t" for name in names), flush=True)
        # The agent session: each configuration keeps its own growing conversation (its own replies), as an agent.
        conversations = {name: [{"role": "system", "content": AGENT_SYSTEM}] for name in names}
        source = file_150()
        for turn in range(args.turns):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            for name in order:
                conv = conversations[name]
                conv.append({"role": "user", "content": edit_request(turn, turn, source)})
                r = run_request(servers[name], conv, args.edit_tokens)
                conv.append({"role": "assistant", "content": r["text"]})
                results[name].append({"category": "agent-edit", "id": f"edit-{turn + 1}", **r})
            print(
                f"edit {turn + 1}: " + ", ".join(f"{name} {results[name][-1]['tokens']}t" for name in names), flush=True
            )
    finally:
        stop_all(servers.values())
    report(results, names, args)


def report(results: dict[str, list[dict[str, Any]]], names: list[str], args: argparse.Namespace) -> None:
    categories = list(dict.fromkeys(r["category"] for r in results[names[0]]))

    def rate(rows: list[dict[str, Any]]) -> float:
        seconds = sum(r["seconds"] for r in rows)
        return sum(r["tokens"] for r in rows) / seconds if seconds > 0 else 0.0

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, threads {args.threads}; demo pair; greedy; "
        f"max tokens {args.max_tokens} (agent edits {args.edit_tokens}); date {time.strftime('%Y-%m-%d')}"
    )
    print("tokens/s (completion tokens over first-to-last chunk time); TTFT median in seconds")
    header = "| category | " + " | ".join(names) + " |"
    print(header)
    print("|" + "---|" * (len(names) + 1))
    table: dict[str, dict[str, float]] = {}
    for category in [*categories, "overall"]:
        cells = []
        for name in names:
            rows = [r for r in results[name] if category == "overall" or r["category"] == category]
            tps = rate(rows)
            ttft = statistics.median(r["ttft"] for r in rows)
            table.setdefault(category, {})[name] = tps
            cells.append(f"{tps:.1f} tok/s, {ttft:.2f} s")
        print(f"| {category} | " + " | ".join(cells) + " |")
    best_llama = [n for n in names if n.startswith("llama-") and n != "llama-plain"]
    if "specchat" in names and best_llama:
        print("\nspecchat over llama-server's best spec configuration per category:")
        for category, row in table.items():
            best = max(best_llama, key=lambda n: row[n])
            print(f"  {category}: {row['specchat'] / row[best]:.2f}x (best: {best})")
    if "specchat-plain" in names and "llama-plain" in names:
        print(
            f"plain: specchat {table['overall']['specchat-plain'] / table['overall']['llama-plain']:.2f}x "
            "llama-server's plain"
        )
    # What a client waits for: completion tokens over the whole request, first token included.
    print("\nend to end (completion tokens over the time from sending to the last chunk), tok/s:")
    print(header)
    print("|" + "---|" * (len(names) + 1))
    whole: dict[str, dict[str, float]] = {}
    for category in [*categories, "overall"]:
        for name in names:
            rows = [r for r in results[name] if category == "overall" or r["category"] == category]
            seconds = sum(r["ttft"] + r["seconds"] for r in rows)
            whole.setdefault(category, {})[name] = sum(r["tokens"] for r in rows) / seconds if seconds > 0 else 0.0
        print(f"| {category} | " + " | ".join(f"{whole[category][n]:.1f}" for n in names) + " |")
    if "specchat" in names and best_llama:
        print(
            "end to end, specchat over llama-server's best spec configuration: "
            + ", ".join(
                f"{category} {row['specchat'] / max(row[n] for n in best_llama):.2f}x"
                for category, row in whole.items()
            )
        )
    for a, b in (
        ("specchat", "specchat-plain"),
        ("specchat-plain", "llama-plain"),
        ("llama-draft-simple", "llama-plain"),
    ):
        if a in names and b in names:
            same = sum(x["text"] == y["text"] for x, y in zip(results[a], results[b], strict=True))
            print(f"greedy texts equal, {a} vs {b}: {same}/{len(results[a])}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
