"""Tool calls: definitions into the prompt, calls out of the reply.

Formats read, as the catalog's families write them:

- Hermes / Qwen 2.5-3.x / SmolLM3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number,
  text around them (an unclosed last one, cut by the token limit or an end token, is read too);
- Llama 3.1-3.3: the whole reply one JSON object ``{"name": ..., "parameters": {...}}`` (or several joined by
  ``;``), optionally after ``<|python_tag|>``;
- Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``.

The definitions go into the prompt through the runtime (:meth:`specchat.core.runtime.runtime.Runtime.prompt`).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_TAG = "[TOOL_CALLS]"
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object as text, as the OpenAI API carries it
    id: str = ""

    def as_dict(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return out if index is None else {"index": index, **out}


def _call(obj: Any, names: frozenset[str] | None) -> ToolCall | None:
    """A ToolCall from a parsed ``{"name", "arguments"|"parameters"}`` object, or None if it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    if names is not None and obj["name"] not in names:
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string already
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(obj["name"], json.dumps(arguments, ensure_ascii=False), "call_" + uuid.uuid4().hex[:24])


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def parse_tool_calls(text: str, tool_names: Sequence[str] | None = None) -> tuple[str, list[ToolCall]]:
    """The reply's text without its tool calls, and the calls (empty when it makes none).

    With ``tool_names`` a bare JSON reply counts as a call only if it names one of them (a model asked for
    JSON is not calling a tool); Hermes tags count whatever they name.
    """
    names = frozenset(tool_names) if tool_names is not None else None
    if HERMES_OPEN in text:
        calls = [_call(_loads(m.group(1)), None) for m in _HERMES.finditer(text)]
        if calls and all(c is not None for c in calls):
            content = _HERMES.sub("", text)
            return ("" if not content.strip() else content.strip()), [c for c in calls if c is not None]
        return text, []
    body = text.strip()
    if body.startswith(MISTRAL_TAG):
        parsed = _loads(body[len(MISTRAL_TAG) :].strip())
        items = parsed if isinstance(parsed, list) else [parsed]
        calls = [_call(item, None) for item in items]
        if calls and all(c is not None for c in calls):
            return "", [c for c in calls if c is not None]
        return text, []
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :].strip()
    if body.startswith("{"):
        parsed = _loads(body)
        parts = [parsed] if parsed is not None else [_loads(p) for p in body.split(";") if p.strip()]
        calls = [_call(p, names) for p in parts]
        if calls and all(c is not None for c in calls):
            return "", [c for c in calls if c is not None]
    return text, []


def releasable(text: str) -> int:
    """How many leading characters of a reply in progress are surely content, not part of a tool call."""
    body = text.lstrip()
    if not body:
        return 0
    for opener in ("{", PYTHON_TAG, MISTRAL_TAG):  # a reply that is (or may become) one JSON call: hold it all
        if body.startswith(opener) or opener.startswith(body):
            return 0
    at = text.find(HERMES_OPEN)
    if at >= 0:
        return at
    return len(text) - _partial_suffix(text, (HERMES_OPEN,))


def _partial_suffix(text: str, words: Sequence[str]) -> int:
    """The length of the longest end of ``text`` that begins one of ``words`` (to hold back while streaming)."""
    best = 0
    for word in words:
        for n in range(min(len(word) - 1, len(text)), best, -1):
            if word.startswith(text[-n:]):
                best = n
                break
    return best


def held_for_stops(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` might begin a stop string (held back while streaming)."""
    return _partial_suffix(text, stops)
