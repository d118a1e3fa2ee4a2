"""Time to first token on the 5th turn of a growing ~3k-token conversation, with and without prompt reuse.

An agent resends the whole conversation every turn. ``specchat serve`` keeps
the target's and the draft's KV of the previous request, so turn 5 decodes
only what follows the longest common prefix. "After another": another
client's request (another conversation) comes between turns 4 and 5, and the
prompt cache loads turn 4's state back ("no cache": with the prompt cache
off, turn 5 is read again). "Without reuse" empties both caches right before
turn 5 (what a server without a prompt cache does on every request). They
are interleaved, ``--repeats`` times each, through the ``openai`` client
against a real server on 127.0.0.1.

    python benchmarks/server_prompt_reuse.py [--repeats 1] [--ctx 8192]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from typing import cast

import openai
from openai.types.chat import ChatCompletionMessageParam

from specchat.core.models.demo import provision_demo_pair
from specchat.core.runtime.runtime import Runtime
from specchat.server.app import ServerConfig, build_app
from specchat.server.protocol import Defaults
from specchat.server.request_queue import RequestQueue
from specchat.server.runner import ServerThread

TOPICS = ["rivers", "bridges", "libraries", "volcanoes", "orchards", "lighthouses", "glaciers", "markets"]


def user_turn(n: int, words: int = 420) -> str:
    """A long, varied user message (about 550 tokens) for turn ``n``."""
    topic = TOPICS[n % len(TOPICS)]
    sentences = [
        f"Note {i} on {topic}: the {['north', 'south', 'east', 'west'][i % 4]} side had "
        f"{(i * 37 + n * 11) % 97} visitors and {(i * 13 + n) % 23} repairs in year {1990 + i % 30}."
        for i in range(words // 16)
    ]
    return f"Here are my notes about {topic}.\n" + " ".join(sentences) + f"\nSummarise the notes about {topic}."


def first_token_seconds(api: openai.OpenAI, messages: list[dict[str, str]], max_tokens: int) -> tuple[float, str, int]:
    started = time.perf_counter()
    first = 0.0
    text = []
    cached = 0
    for chunk in api.chat.completions.create(
        model="m",
        messages=cast("list[ChatCompletionMessageParam]", messages),  # the prompt file's plain JSON messages
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and (chunk.choices[0].delta.content or chunk.choices[0].finish_reason) and not first:
            first = time.perf_counter() - started
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            details = chunk.usage.prompt_tokens_details
            cached = details.cached_tokens or 0 if details is not None else 0
    return first, "".join(text), cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--reply-tokens", type=int, default=32)
    args = parser.parse_args()
    pair = provision_demo_pair()
    runtime = Runtime.load(pair.target, pair.draft, n_ctx=args.ctx)
    host = RequestQueue(runtime)
    # No time limit worth the name: on a loaded machine reading 3k tokens can take minutes.
    config = ServerConfig(time_limit=7200, defaults=Defaults(max_tokens_limit=args.ctx))
    server = ServerThread(build_app(host, config)).start()
    api = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    try:
        messages = [{"role": "system", "content": "You are a careful assistant who summarises notes."}]
        for turn in range(4):
            messages.append({"role": "user", "content": user_turn(turn)})
            _, reply, _ = first_token_seconds(api, messages, args.reply_tokens)
            print(f"turn {turn + 1} done", flush=True)
            messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": user_turn(4)})
        fifth = runtime.target.tokenize(runtime.template.render(messages), add_special=True, parse_special=True)
        before = messages[:-1]
        labels = ("with reuse", "after another", "after another, no cache", "without reuse")
        timings: dict[str, list[float]] = {label: [] for label in labels}
        cached_seen: dict[str, list[int]] = {label: [] for label in labels}
        budget = runtime.prompt_cache.budget
        another = [
            {"role": "system", "content": "You translate notes into French."},
            {"role": "user", "content": user_turn(7)},
        ]
        for _ in range(args.repeats):
            for label in labels:
                # Turn 4's conversation is in the caches (as after turn 4's reply), then turn 5 arrives; nothing
                # else is kept (the server is idle between requests: its runtime thread waits on the queue).
                runtime.empty_caches()
                first_token_seconds(api, before[:-1], args.reply_tokens)  # turn 4 again (greedy: same reply)
                runtime.prompt_cache.budget = 0 if label == "after another, no cache" else budget
                if label.startswith("after another"):  # another client's request comes first
                    first_token_seconds(api, another, 4)
                if label == "without reuse":
                    runtime.empty_caches()
                seconds, _, cached = first_token_seconds(api, messages, 8)
                timings[label].append(seconds)
                cached_seen[label].append(cached)
                runtime.prompt_cache.budget = budget
        print(
            f"machine: {platform.machine()} {platform.processor() or ''}, demo pair, ctx {args.ctx}; "
            f"turn 5 prompt {len(fifth)} tokens"
        )
        for label, values in timings.items():
            print(
                f"{label:>24}: time to first token median {statistics.median(values):.3f} s "
                f"(runs {', '.join(f'{v:.3f}' for v in values)}); cached prompt tokens {cached_seen[label]}"
            )
        ratio = statistics.median(timings["without reuse"]) / statistics.median(timings["with reuse"])
        print(f"reuse makes turn 5's first token {ratio:.1f}x sooner")
        kept = statistics.median(timings["after another, no cache"]) / statistics.median(timings["after another"])
        print(f"after another client's request, the prompt cache makes it {kept:.1f}x sooner")
    finally:
        server.stop()
        host.close()
        runtime.close()


if __name__ == "__main__":
    main()
