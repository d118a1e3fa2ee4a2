"""Chat prompts from the GGUF's own chat template, rendered in a sandboxed Jinja.

llama-cpp-python has an equivalent formatter (``Jinja2ChatFormatter``), but
this package must not import llama_cpp; the renderer below mirrors it
(ImmutableSandboxedEnvironment, trim/lstrip blocks, loop controls, tojson,
raise_exception, strftime_now) in a few lines of jinja2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specchat.core.types import SpecchatError

# Used when a GGUF carries no template: ChatML, which most small instruct models understand.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

ROLES = frozenset({"system", "user", "assistant"})


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise SpecchatError(f"chat template refused the conversation: {message}")


class ChatTemplate:
    """A compiled chat template plus the special-token strings it refers to."""

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise SpecchatError(f"the model's chat template does not compile: {exc}") from None

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        validate_messages(messages)
        try:
            return self._template.render(
                messages=list(messages),
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                add_generation_prompt=add_generation_prompt,
                raise_exception=_raise,
                strftime_now=lambda fmt: datetime.now().strftime(fmt),
            )
        except jinja2.TemplateError as exc:
            raise SpecchatError(f"the chat template failed: {exc}") from None


def validate_messages(messages: Sequence[dict[str, str]]) -> None:
    """Raise a one-line error for an empty or malformed message list."""
    if not messages:
        raise SpecchatError("the conversation is empty: give at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise SpecchatError(
                f"message {i + 1} must be {{\"role\": system|user|assistant, \"content\": text}}, got {m!r:.80}"
            )
