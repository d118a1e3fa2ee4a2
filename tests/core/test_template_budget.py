"""Chat templates come from downloaded files: every render has a time, loop, depth and size budget,
and every failure is one line."""

from __future__ import annotations

import time
from typing import Any

import pytest

from specchat.core.runtime.template import CHATML_TEMPLATE, ChatTemplate, RenderLimits, TemplateBudgetError
from specchat.core.types import SpecchatError

HI = [{"role": "user", "content": "hi"}]

HOSTILE = {
    "nested range(99999) loops": (
        "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
        "looped more than",
    ),
    "range(10**9)": ("{% for i in range(10**9) %}{% endfor %}", "over its budget"),
    "range(10**9)|length": ("{{ range(10**9)|length }}", "over its budget"),
    "loops over a long string": (
        "{% set s = 'x' * 99999 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
        "looped more than",
    ),
    "a recursive macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested calls more than"),
    "a recursive loop": ("{% for m in messages recursive %}{{ loop([m]) }}{% endfor %}", "nested calls more than"),
    "1/0": ("{{ 1/0 }}", "ZeroDivisionError: division by zero"),
    "an undefined name": ("{{ nothing.here }}", "'nothing' is undefined"),
    "int + None": ("{{ 1 + none }}", "TypeError"),
    "renders nothing": ("{% if false %}never{% endif %}", "rendered an empty prompt"),
    "renders only spaces": ("{{ '   ' }}\n", "rendered an empty prompt"),
    "a string doubled in a namespace": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "over its budget",
    ),
    "'x' * 10**9": ("{{ 'x' * 10**9 }}", "over its budget"),
    "center(10**9) filter": ("{{ 'x'|center(10**9) }}", "over its budget"),
    "center(999999999) folded at compile time": ("{{ 'x'|center(999999999) }}", "over its budget"),
    "str.center method": ("{{ 'x'.center(10**9) }}", "over its budget"),
    "a billion-wide % field": ("{{ '%999999999d' % 1 }}", "wide, over its budget"),
    "a billion-wide format field": ("{{ '{:>999999999}'.format(1) }}", "wide, over its budget"),
    "a billion-wide format filter": ("{{ '%999999999d'|format(1) }}", "wide, over its budget"),
    "2 ** 10**10": ("{{ 2 ** (10 ** 10) }}", "too large"),
    "a list holding one list 300,000 times": ("{{ [[0]*1000]*300000 }}", "would print a value of over"),
    "tojson of it": ("{{ ([[0]*1000]*300000)|tojson }}", "would print a value of over"),
    "~ of it": ("{{ ([[0]*1000]*300000) ~ '' }}", "would print a value of over"),
    "% of it": ("{{ '%s' % ([[0]*1000]*300000,) }}", "would print a value of over"),
    "sorting it": ("{{ ([[0]*1000]*300000)|sort|length }}", "would print a value of over"),
    "replace filter 1500-fold": ("{{ ('a'*1000000)|replace('a','b'*1500) }}", "replace would build 1,500,000,000"),
    "str.replace 1500-fold": ("{{ ('a'*1000000).replace('a','b'*1500) }}", "replace would build"),
    "join with a long separator": ("{{ (['a']*1000)|join('x'*1000000) }}", "join would build"),
    "str.join with a long separator": ("{{ ('x'*1000000).join(['a']*1000) }}", "join would build"),
    "expandtabs(1000)": ("{{ ('\t'*1000000).expandtabs(1000) }}", "expandtabs would build"),
    "indent(1000) of a million lines": ("{{ ('\n'*1000000)|indent(1000) }}", "indent would build"),
    "a huge JSON indent": ("{{ [0]|tojson(indent=100000) }}", "JSON indent of 100000"),
    "a '*' width of 10**9": ("{{ '%*d' % (10**9, 1) }}", "asked for a size of 1,000,000,000"),
    "a list nested 5000 deep": (
        "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
        "nested over 200 deep",
    ),
    "a sandbox escape": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "the chat template failed"),
    "raise_exception": (
        "{{ raise_exception('roles must alternate') }}",
        "refused the conversation: roles must alternate",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_template_fails_quickly_with_one_line(case: str) -> None:
    source, expected = HOSTILE[case]
    start = time.monotonic()
    with pytest.raises(SpecchatError) as info:
        ChatTemplate(source).render(HI)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert expected in message, message
    assert "\n" not in message and len(message) < 400
    assert elapsed < 5.0, f"{case} took {elapsed:.1f} s"


def test_the_deadline_stops_a_render_the_loop_budget_would_allow() -> None:
    slow = ChatTemplate(
        "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
        limits=RenderLimits(seconds=0.3, iterations=10**12),
    )
    start = time.monotonic()
    with pytest.raises(TemplateBudgetError, match=r"took longer than 0\.3 s"):
        slow.render(HI)
    assert time.monotonic() - start < 2.0


def test_the_output_budget_grows_with_the_conversation() -> None:
    template = ChatTemplate(CHATML_TEMPLATE, limits=RenderLimits(base_chars=1000, chars_per_input_char=2))
    long_message = [{"role": "user", "content": "y" * 5000}]
    assert "y" * 5000 in template.render(long_message)  # 5000 chars of input buy 10000 of output
    noisy = ChatTemplate(
        "{% for m in messages %}{{ m.content * 3 }}{% endfor %}",
        limits=RenderLimits(base_chars=1000, chars_per_input_char=2),
    )
    with pytest.raises(TemplateBudgetError):
        noisy.render(long_message)


def test_a_template_that_does_not_compile_is_one_line() -> None:
    with pytest.raises(SpecchatError, match="does not compile") as info:
        ChatTemplate("{% for m in messages %}{{ m.content }")
    assert "\n" not in str(info.value)


def test_deeply_nested_template_source_is_one_line() -> None:
    with pytest.raises(SpecchatError, match="does not compile") as info:
        ChatTemplate("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}")
    assert "\n" not in str(info.value)


def test_normal_template_features_still_work() -> None:
    source = (
        "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ m['role']|upper }}:{{ m.content|trim }}"
        "{% if not loop.last %}|{% endif %}{% endfor %}"
        "{{ range(3)|list|join(',') }}{{ '%5.2f'|format(1.5) }}{{ '{:>4}'.format('ab') }}{{ [1, 2] + [3] }}"
        "{{ 2 ** 10 }}{{ messages|map(attribute='role')|join('+') }}{{ {'a': 1}|tojson }}"
    )
    out = ChatTemplate(source).render([{"role": "system", "content": " be brief "}, {"role": "user", "content": "hi"}])
    assert out == '1/2SYSTEM:be brief|2/2USER:hi0,1,2 1.50  ab[1, 2, 3]1024system+user{"a": 1}'


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], "the conversation is empty"),
        ([1, 2, 3], "message 1 must be an object"),
        ([{"role": "user"}], 'message 1 (user) has no "content"'),
        ([{"content": "hi"}], "message 1 has no role"),
        ([{"role": "bot", "content": "hi"}], "message 1 has role 'bot'"),
        ([{"role": "user", "content": ["a"]}], "message 1 (user) has content ['a']"),
        (
            [{"role": "user", "content": "ok"}, {"role": "user", "content": "bad \ud800 text"}],
            "message 2 (user) holds text that is not valid Unicode (a lone surrogate at character 4)",
        ),
    ],
)
def test_malformed_messages_say_what_is_wrong(messages: list[Any], expected: str) -> None:
    with pytest.raises(SpecchatError) as info:
        ChatTemplate(None).render(messages)
    assert expected in str(info.value) and "\n" not in str(info.value)
    if messages:
        assert "empty" not in str(info.value)


def test_the_real_smollm2_template_stays_fast(demo_pair) -> None:
    from specchat.core.llama.model import Model

    model = Model(demo_pair.target, vocab_only=True)
    try:
        source = model.chat_template()
    finally:
        model.close()
    assert source and "im_start" in source
    template = ChatTemplate(source, bos_token="<|im_start|>", eos_token="<|im_end|>")
    messages = [{"role": "system", "content": "You are terse."}]
    for i in range(100):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20})
    messages.append({"role": "user", "content": "last"})
    start = time.perf_counter()
    for _ in range(20):
        text = template.render(messages)
    per_render = (time.perf_counter() - start) / 20
    assert "<|im_start|>user\nlast<|im_end|>" in text
    assert per_render < 0.05, f"{per_render * 1000:.1f} ms per render of 102 messages"
