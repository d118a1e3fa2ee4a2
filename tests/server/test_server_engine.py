"""What the server does with the runtime: greedy output as ``specchat chat`` gives it, prompt reuse across
requests, tool definitions through the prompt and tool calls out of the reply."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import cast

from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from specchat.core.types import SamplerParams
from support.api_clients import cached_tokens, client, extra, function_calls, usage_of
from support.identity import assert_same_or_tie, plain_greedy

PROMPT = "Write two sentences about rivers."
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def wire(messages: list[dict[str, str]]) -> list[ChatCompletionMessageParam]:
    """``messages`` as the client's parameter type: the same plain JSON objects (the runtime renders these)."""
    return cast("list[ChatCompletionMessageParam]", messages)


def streamed_tokens(served, messages: list[dict[str, str]], max_tokens: int) -> tuple[list[int], str]:
    """The reply's token ids (from the fates extension) and its text, greedy."""
    chunks = list(
        client(served).chat.completions.create(
            model="m",
            messages=wire(messages),
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            extra_body={"speculative": {"fates": True}},
        )
    )
    fates = [f for c in chunks if c.choices for f in extra(c.choices[0]).get("specchat_fates") or []]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return [f["token"] for f in fates if f["fate"] != "rejected"], text


def test_greedy_output_matches_specchat_chat_json(served, demo_pair, demo_runtime) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "specchat",
            "chat",
            "--target",
            str(demo_pair.target),
            "--draft",
            str(demo_pair.draft),
            "--max-tokens",
            "48",
            "--json",
            PROMPT,
        ],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    chat = json.loads(out.stdout)
    tokens, text = streamed_tokens(served, [{"role": "user", "content": PROMPT}], 48)
    prompt = demo_runtime.target.tokenize(chat["prompt_text"], add_special=True, parse_special=True)
    if tokens != chat["tokens"]:  # both must then be plain greedy decoding's, or leave it only at a float tie
        plain = plain_greedy(demo_runtime.target_context, prompt, 48, SamplerParams(), demo_runtime.target.eog_tokens)
        assert_same_or_tie(demo_runtime.target_context, prompt, plain, tokens, label="server")
        assert_same_or_tie(demo_runtime.target_context, prompt, plain, chat["tokens"], label="specchat chat")
    else:
        assert text == chat["text"]


def test_a_growing_conversation_reuses_the_previous_prompt(served, demo_runtime) -> None:
    api = client(served)
    messages: list[dict[str, str]] = [
        {"role": "system", "content": "You are a patient teacher."},
        {"role": "user", "content": "Explain what a prime number is."},
    ]
    first = api.chat.completions.create(model="m", messages=wire(messages), max_tokens=24, temperature=0)
    answer = first.choices[0].message.content
    assert answer is not None
    messages += [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Give three examples."},
    ]
    second = api.chat.completions.create(model="m", messages=wire(messages), max_tokens=24, temperature=0)
    cached = cached_tokens(second)
    # The whole first prompt is kept (its last token too, once the reply followed it); only the new turn is read.
    assert cached >= usage_of(first).prompt_tokens - 1
    assert extra(second)["speculative"]["reused_prompt_tokens"] == cached
    changed = [{"role": "system", "content": "You are a grumpy pirate."}, *messages[1:]]
    third = api.chat.completions.create(model="m", messages=wire(changed), max_tokens=24, temperature=0)
    assert cached_tokens(third) < cached  # a changed prefix costs what changed
    # Reuse changes nothing in the reply: the same request on emptied caches gives the same tokens.
    reused, _ = streamed_tokens(served, messages, 24)
    demo_runtime.empty_caches()  # the server is idle: its runtime thread waits on the queue
    fresh, _ = streamed_tokens(served, messages, 24)
    if reused != fresh:
        prompt = demo_runtime.target.tokenize(
            demo_runtime.template.render(messages), add_special=True, parse_special=True
        )
        plain = plain_greedy(demo_runtime.target_context, prompt, 24, SamplerParams(), demo_runtime.target.eog_tokens)
        assert_same_or_tie(demo_runtime.target_context, prompt, plain, reused, label="reused")
        assert_same_or_tie(demo_runtime.target_context, prompt, plain, fresh, label="fresh")


def test_interleaved_agents_each_find_their_conversation_kept(served, demo_runtime) -> None:
    """Two clients' conversations in turn: each request's prompt drops the other's from the caches, and the
    prompt cache loads it back, as llama-server's prompt cache does."""
    api = client(served)
    demo_runtime.empty_caches()
    chats: list[list[ChatCompletionMessageParam]] = [
        [
            {"role": "system", "content": "You review Python code."},
            {"role": "user", "content": "Review this:\n" + "def add(a, b):\n    return a + b\n" * 12},
        ],
        [
            {"role": "system", "content": "You translate English to French."},
            {"role": "user", "content": "Translate: " + "The weather is lovely today and the sea is calm. " * 6},
        ],
    ]
    for _ in range(2):
        for chat in chats:
            reply = api.chat.completions.create(model="m", messages=chat, max_tokens=8, temperature=0)
            chat += [
                {"role": "assistant", "content": reply.choices[0].message.content},
                {"role": "user", "content": "Go on."},
            ]
    for chat in chats:  # each conversation's third turn: the whole of its second is kept, only the new turn read
        before = demo_runtime.target.tokenize(
            demo_runtime.template.render(chat[:-2]), add_special=True, parse_special=True
        )
        reply = api.chat.completions.create(model="m", messages=chat, max_tokens=8, temperature=0)
        assert cached_tokens(reply) >= len(before) - 1, reply.usage
    assert demo_runtime.prompt_cache.stats.loaded >= 2


def test_tool_definitions_reach_the_prompt_and_calls_come_back_as_tool_calls(served) -> None:
    api = client(served)
    question: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    without = api.chat.completions.create(model="m", messages=question, max_tokens=2)
    with_tools = api.chat.completions.create(model="m", messages=question, tools=TOOLS, max_tokens=2)
    # The demo's template has no tools: the definitions go into a system message, JSON and all.
    assert usage_of(with_tools).prompt_tokens > usage_of(without).prompt_tokens + len(json.dumps(TOOLS)) // 8
    ask: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": f"Repeat exactly this text and nothing else:\n{CALL}"}
    ]
    reply = api.chat.completions.create(model="m", messages=ask, tools=TOOLS, max_tokens=40, temperature=0)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    made = function_calls(choice.message)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in made] == [("get_weather", {"city": "Oslo"})]
    chunks = list(
        api.chat.completions.create(model="m", messages=ask, tools=TOOLS, max_tokens=40, temperature=0, stream=True)
    )
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = []
    for t in (t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []):
        assert t.function is not None and t.function.arguments is not None
        calls.append((t.index, t.function.name, json.loads(t.function.arguments)))
    assert calls == [(0, "get_weather", {"city": "Oslo"})]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # The call and its result sent back: rendered through the template, answered.
    history: list[ChatCompletionMessageParam] = [
        *ask,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in made
            ],
        },
        {"role": "tool", "tool_call_id": made[0].id, "content": "-3 C, snow"},
    ]
    answer = api.chat.completions.create(model="m", messages=history, tools=TOOLS, max_tokens=8)
    assert usage_of(answer).prompt_tokens > usage_of(reply).prompt_tokens
