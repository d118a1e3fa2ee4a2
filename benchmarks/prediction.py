"""Predicted outputs: edits of a 177-line Python file sent to ``specchat serve`` with the file as the prediction.

Workload: one request per edit of ``benchmarks/prompts/edit_inventory.py`` (a rename, a docstring per function,
a changed constant; and, as the ceiling, the file repeated unchanged), each asking for the whole edited file,
through the official ``openai`` client, streamed, greedy, on the demo pair. Each edit is sent in four
configurations, taking turns (the order rotates per edit, so load on a shared machine falls on all alike):

- ``prediction``: the file as ``prediction`` (the server's default drafter);
- ``no prediction``: the same request without it (lookup still sees the file in the prompt);
- ``plain``: plain decoding (``speculative.drafter: none``);
- ``unrelated``: a prediction of unrelated prose.

Per configuration: tokens per second (completion tokens over the time from the first to the last chunk), end to
end (completion tokens over the time from sending to the last chunk: the first token included), each over
plain decoding, the prediction tokens accepted and rejected (``usage.completion_tokens_details``), and whether
the greedy text is plain decoding's. With ``--llama-server PATH`` (or the binary in
~/.cache/specchat-llama-tools when it exists), llama-server's spec types run the same requests with the file in
the prompt (it takes no prediction).

    python benchmarks/prediction.py [--max-tokens 1200] [--edits rename docstrings constant repeat] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_vs_llama_server import CACHE, LLAMA, Server, free_port, read_stream, serve_command, start, stop_all

FILE = Path(__file__).resolve().parent / "prompts" / "edit_inventory.py"
EDITS = {
    "rename": "Rename the class Inventory to Stockroom everywhere, and the method restock to refill.",
    "docstrings": "Add a one-line docstring to every function and method.",
    "constant": "Change REORDER_LEVEL from 5 to 8.",
    "repeat": "Repeat the file exactly as it is.",  # the ceiling: a reply that is the prediction
}
SYSTEM = "You edit code. Reply with the whole edited file in one Python code block and nothing else."
UNRELATED = (
    "The committee met on Tuesday to discuss the budget for the new library wing. After a long debate about "
    "the roof, the heating and the opening hours, the members agreed to meet again in spring. "
) * 12
CONFIGS = ("prediction", "no prediction", "plain", "unrelated")


def messages(edit: str, source: str) -> list[ChatCompletionMessageParam]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Here is edit_inventory.py:\n```python\n{source}```\n{EDITS[edit]}"},
    ]


def request(api: openai.OpenAI, config: str, edit: str, source: str, max_tokens: int) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if config == "prediction":
        extra["prediction"] = {"type": "content", "content": source}
    elif config == "unrelated":
        extra["prediction"] = {"type": "content", "content": UNRELATED}
    elif config == "plain":
        extra["extra_body"] = {"speculative": {"drafter": "none"}}
    started = time.perf_counter()
    stream = api.chat.completions.create(
        model="m",
        messages=messages(edit, source),
        max_tokens=max_tokens,
        temperature=0,
        seed=0,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    reply = read_stream(stream, started)
    first, last, usage = reply.first, reply.last, reply.usage
    details = usage.completion_tokens_details if usage is not None else None
    return {
        "config": config,
        "edit": edit,
        "ttft": first,
        "seconds": last - first,
        "end_to_end": last,
        "tokens": usage.completion_tokens if usage is not None else reply.pieces,
        "accepted_prediction": details.accepted_prediction_tokens if details is not None else None,
        "rejected_prediction": details.rejected_prediction_tokens if details is not None else None,
        "text": reply.text,
    }


def llama_request(server: Server, edit: str, source: str, max_tokens: int) -> dict[str, Any]:
    result = request(server.api, "no prediction", edit, source, max_tokens)
    return {**result, "config": server.name}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=1200)
    parser.add_argument("--edits", nargs="*", default=list(EDITS), choices=list(EDITS))
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--llama-server", type=Path, default=None, help="also run llama-server's spec types")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from specchat.core.models.demo import provision_demo_pair

    pair = provision_demo_pair()
    source = FILE.read_text(encoding="utf-8")
    logs = CACHE / "bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = serve_command(pair.target, pair.draft, port, args.ctx, args.threads)
    binary = args.llama_server or CACHE / "build" / "bin" / "llama-server"
    servers = [start("specchat", command, port, logs / "prediction-specchat.log")]
    llama_names: list[str] = []
    if binary.exists():
        for name, extra in LLAMA.items():
            if name == "llama-plain":
                continue
            lport = free_port()
            draft = ["-md", str(pair.draft)] if "draft" in name else []
            lcommand = [str(binary), "-m", str(pair.target), *draft, "--port", str(lport), "--host", "127.0.0.1"]
            lcommand += ["-c", str(args.ctx), "-np", "1", "-t", str(args.threads), "-ngl", "0", "-ngld", "0"]
            lcommand += ["--no-webui", "--seed", "0", *extra]
            servers.append(start(name, lcommand, lport, logs / f"prediction-{name}.log"))
            llama_names.append(name)
    names = [*CONFIGS, *llama_names]
    results: list[dict[str, Any]] = []
    try:
        api = servers[0].api
        # Warm-up: the prompt's first read, the target's and the draft model's, is no configuration's (each
        # server keeps the file's tokens from then on, as an editor's second request finds them).
        request(api, "plain", args.edits[0], source, 8)
        request(api, "prediction", args.edits[0], source, 24)
        for server in servers[1:]:
            llama_request(server, args.edits[0], source, 8)
        for n, edit in enumerate(args.edits):
            order = names[n % len(names) :] + names[: n % len(names)]
            for name in order:
                if name in CONFIGS:
                    results.append(request(api, name, edit, source, args.max_tokens))
                else:
                    server = next(s for s in servers if s.name == name)
                    results.append(llama_request(server, edit, source, args.max_tokens))
                r = results[-1]
                print(
                    f"{edit:<11}{name:<24}{r['tokens']:>6} tokens {r['tokens'] / r['seconds']:>7.1f} tok/s "
                    f"end to end {r['end_to_end']:>6.1f} s",
                    flush=True,
                )
    finally:
        stop_all(servers)
    report(results, names, args)


def report(results: list[dict[str, Any]], names: list[str], args: argparse.Namespace) -> None:
    def rows(name: str) -> list[dict[str, Any]]:
        return [r for r in results if r["config"] == name]

    def rate(name: str) -> float:
        tokens: int = sum(r["tokens"] for r in rows(name))
        seconds: float = sum(r["seconds"] for r in rows(name))
        return tokens / max(1e-9, seconds)

    def whole(name: str) -> float:
        tokens: int = sum(r["tokens"] for r in rows(name))
        seconds: float = sum(r["end_to_end"] for r in rows(name))
        return tokens / max(1e-9, seconds)

    plain = {r["edit"]: r["text"] for r in rows("plain")}
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, threads {args.threads}; demo pair; greedy; "
        f"max tokens {args.max_tokens}; edits {', '.join(args.edits)}; date {time.strftime('%Y-%m-%d')}"
    )
    print(
        "| configuration | tokens | tok/s | end to end tok/s | first token s | vs plain | vs plain end to end "
        "| prediction accepted / rejected | greedy text = plain |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        got = rows(name)
        if not got:
            continue
        accepted = [r["accepted_prediction"] for r in got if r["accepted_prediction"] is not None]
        rejected = [r["rejected_prediction"] for r in got if r["rejected_prediction"] is not None]
        counts = f"{sum(accepted)} / {sum(rejected)}" if accepted else "-"
        same = sum(r["text"] == plain.get(r["edit"]) for r in got)
        ttft = sum(r["ttft"] for r in got) / len(got)
        print(
            f"| {name} | {sum(r['tokens'] for r in got)} | {rate(name):.1f} | {whole(name):.1f} | {ttft:.2f} "
            f"| {rate(name) / rate('plain'):.2f}x | {whole(name) / whole('plain'):.2f}x | {counts} "
            f"| {same}/{len(got)} |"
        )
    for name in names:
        if name.startswith("llama-") and rows(name):
            print(f"prediction end to end over {name}: {whole('prediction') / whole(name):.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
