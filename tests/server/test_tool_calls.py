"""Tool calls read out of replies as the catalog's families write them (strings as those models produce them)."""

from __future__ import annotations

import json

from specchat.core.runtime.template import template_uses_tools, tools_in_system
from specchat.server.tool_calls import held_for_stops, parse_tool_calls, releasable

QWEN = (
    '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA", '
    '"unit": "celsius"}}\n</tool_call>\n<tool_call>\n{"name": "get_temperature_date", "arguments": '
    '{"location": "San Francisco, CA, USA", "date": "2024-10-01", "unit": "celsius"}}\n</tool_call>'
)
LLAMA = '{"name": "get_current_conditions", "parameters": {"location": "San Francisco, CA", "unit": "Fahrenheit"}}'


def test_qwen_hermes_calls_are_read_in_order() -> None:
    content, calls = parse_tool_calls(QWEN, ["get_current_temperature", "get_temperature_date"])
    assert content == ""
    assert [c.name for c in calls] == ["get_current_temperature", "get_temperature_date"]
    assert json.loads(calls[1].arguments) == {
        "location": "San Francisco, CA, USA",
        "date": "2024-10-01",
        "unit": "celsius",
    }
    assert calls[0].id.startswith("call_") and calls[0].id != calls[1].id


def test_text_around_a_hermes_call_is_the_content_and_an_unclosed_call_is_read() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "search", "arguments": {"q": "llama.cpp"}}'
    content, calls = parse_tool_calls(text, ["search"])
    assert (
        content == "Let me check."
        and calls[0].name == "search"
        and json.loads(calls[0].arguments) == {"q": "llama.cpp"}
    )


def test_llama3_json_calls_with_parameters_and_python_tag() -> None:
    for text in (LLAMA, "<|python_tag|>" + LLAMA, f"{LLAMA}; {LLAMA}"):
        content, calls = parse_tool_calls(text, ["get_current_conditions"])
        assert content == "" and calls and all(c.name == "get_current_conditions" for c in calls)
        assert json.loads(calls[0].arguments)["unit"] == "Fahrenheit"


def test_mistral_calls() -> None:
    text = '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "add", "arguments": {"a": 3}}]'
    content, calls = parse_tool_calls(text, ["add"])
    assert content == "" and [json.loads(c.arguments) for c in calls] == [{"a": 1, "b": 2}, {"a": 3}]


def test_what_is_not_a_call_stays_text() -> None:
    for text in (
        '{"answer": 42}',
        '{"name": "unknown_tool", "parameters": {}}',
        "<tool_call>\nnot json\n</tool_call>",
        "Plain words.",
    ):
        content, calls = parse_tool_calls(text, ["get_current_conditions"])
        assert calls == [] and content == text


def test_streaming_holds_back_what_may_become_a_call_or_a_stop() -> None:
    assert releasable("Sure, here") == len("Sure, here")
    assert releasable("Sure <tool") == len("Sure ")
    assert releasable("Sure <tool_call>{") == len("Sure ")
    assert releasable('  {"name"') == 0 and releasable("<|python") == 0
    assert held_for_stops("the end is ne", ["near", "END"]) == 2
    assert held_for_stops("nothing", ["STOP"]) == 0


def test_definitions_go_to_the_system_message_when_the_template_has_no_tools() -> None:
    assert template_uses_tools("{% if tools %}{{ tools | tojson }}{% endif %}")
    assert not template_uses_tools("{% for message in messages %}{{ message.content }}{% endfor %}")
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}
    out = tools_in_system([{"role": "user", "content": "hi"}], [tool])
    assert out[0]["role"] == "system" and json.dumps(tool) in out[0]["content"] and out[1]["content"] == "hi"
    kept = tools_in_system([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], [tool])
    assert kept[0]["content"].startswith("Be brief.\n\n# Tools") and len(kept) == 2


def test_a_template_that_uses_tools_gets_them_as_its_variable() -> None:
    from specchat.core.runtime.template import ChatTemplate

    source = (
        "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    )
    template = ChatTemplate(source)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    messages = [{"role": "user", "content": "hi"}]
    assert template_uses_tools(source)
    assert template.render(messages, tools=[tool]) == "<tools>get_weather;</tools>[user]hi"
    assert template.render(messages) == "[user]hi"
