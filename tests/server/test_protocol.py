"""Reading OpenAI requests: what is supported becomes engine parameters, the rest a 400 naming it."""

from __future__ import annotations

import json

import pytest

from specchat.core.types import DrafterKind
from specchat.server.errors import ApiError
from specchat.server.protocol import Defaults, parse_chat, parse_completion, parse_json

DEFAULTS = Defaults(max_tokens_limit=512)
USER = [{"role": "user", "content": "hi"}]


def chat(**fields: object):
    return parse_chat({"model": "m", "messages": USER, **fields}, DEFAULTS)


def refused(call, *args: object, **fields: object) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args, **fields)
    return caught.value


def test_a_plain_request_gets_the_server_defaults() -> None:
    request = chat()
    assert request.kind == "chat" and not request.stream
    assert request.params.max_tokens == 512 and request.params.sampler.temperature == 0.0
    assert request.messages == ({"role": "user", "content": "hi"},)
    assert request.spec.drafter is None and request.spec.depth is None and not request.spec.fates


def test_sampling_limits_stops_and_speculative_options_are_read() -> None:
    request = chat(
        temperature=0.7,
        top_p=0.9,
        seed=7,
        stop=["\n\n", "END"],
        max_completion_tokens=33,
        stream=True,
        stream_options={"include_usage": True},
        speculative={"depth": 3, "drafter": "ngram", "fates": True},
    )
    p = request.params
    assert (p.sampler.temperature, p.sampler.top_p, p.seed, p.max_tokens) == (0.7, 0.9, 7, 33)
    assert p.stop_strings == ("\n\n", "END")
    assert request.stream and request.include_usage
    assert (request.spec.depth, request.spec.drafter, request.spec.fates) == (3, DrafterKind.NGRAM, True)
    assert chat(max_tokens=5).params.max_tokens == 5


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"functions": []}, "functions"),
        ({"max_tokens": 513}, "max_tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3}, "temperature"),
        ({"stop": [1]}, "stop"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"speculative": {"depth": 17}}, "speculative.depth"),
        ({"speculative": {"drafter": "oracle"}}, "speculative.drafter"),
        ({"speculative": {"width": 2}}, "speculative.width"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "messages[0].role"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}
                ]
            },
            "messages[0].content[0]",
        ),
    ],
)
def test_unsupported_or_bad_fields_are_a_400_naming_them(fields: dict[str, object], param: str) -> None:
    error = refused(chat, **fields)
    assert error.status == 400 and error.param == param, (error.param, str(error))
    body = error.body()["error"]
    assert body["type"] == "invalid_request_error" and body["message"]


def test_tool_calls_and_results_are_written_in_the_hermes_form() -> None:
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Oslo?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "-3 C"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    request = parse_chat({"messages": messages, "tools": tools}, DEFAULTS)
    assert [m["role"] for m in request.messages] == ["system", "user", "assistant", "user"]
    assert request.messages[1]["content"] == "Weather in Oslo?"
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert request.messages[2]["content"] == f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    assert request.messages[3]["content"] == "<tool_response>\n-3 C\n</tool_response>"
    assert request.tools[0]["function"]["name"] == "get_weather"
    assert parse_chat({"messages": messages, "tools": tools, "tool_choice": "none"}, DEFAULTS).tools == ()


def test_completions_take_one_text_prompt() -> None:
    assert parse_completion({"prompt": ["Once"], "max_tokens": 4}, DEFAULTS).prompt == "Once"
    assert refused(parse_completion, {"prompt": [1, 2, 3]}, DEFAULTS).param == "prompt"
    assert refused(parse_completion, {"prompt": "x", "echo": True}, DEFAULTS).param == "echo"
    assert refused(parse_completion, {"prompt": "x", "best_of": 3}, DEFAULTS).param == "best_of"


@pytest.mark.parametrize("body", [b"{", b"[1, 2]", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b""])
def test_a_body_that_is_no_json_object_is_a_400(body: bytes) -> None:
    error = refused(parse_json, body)
    assert error.status == 400 and "JSON" in str(error) or "nested" in str(error) or "UTF-8" in str(error)


@pytest.mark.parametrize(
    "name", ["temperature", "top_p", "top_k", "min_p", "repeat_penalty", "seed", "max_tokens", "max_completion_tokens"]
)
def test_a_number_no_float_holds_is_a_400_naming_it(name: str) -> None:
    error = refused(chat, **{name: 10**400})
    assert error.status == 400 and error.param == name
    assert "between" in str(error) and len(str(error)) < 200  # the number is cut short, not printed whole


def test_whole_numbers_far_out_of_range_are_400s_too() -> None:
    assert refused(chat, n=10**400).param == "n"
    assert refused(chat, speculative={"depth": 10**400}).param == "speculative.depth"
    assert refused(chat, top_logprobs=10**400).param == "top_logprobs"
    assert refused(chat, seed=-(10**400)).param == "seed"


def test_a_null_field_is_a_field_not_given() -> None:
    request = chat(
        max_completion_tokens=None,
        max_tokens=3,
        temperature=None,
        model=None,
        stop=None,
        seed=None,
        stream=True,
        stream_options={"include_usage": None},
        speculative={"depth": None, "drafter": None, "fates": None},
    )
    assert request.params.max_tokens == 3 and request.params.sampler.temperature == 0.0
    assert request.stream and not request.include_usage
    assert request.spec.depth is None and request.spec.drafter is None and not request.spec.fates
    assert chat(max_completion_tokens=5, max_tokens=None).params.max_tokens == 5
    assert refused(chat, max_completion_tokens=None, max_tokens=0).param == "max_tokens"
