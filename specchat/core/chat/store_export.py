"""A stored conversation as a JSON or Markdown file (the window's Export)."""

from __future__ import annotations

import json
from typing import Any

from .attachments import block
from .documents import human_size
from .store_codec import ConversationInfo, StoredMessage


def as_json(info: ConversationInfo, messages: list[StoredMessage]) -> str:
    """The conversation with every message's figures and spans, as indented JSON."""
    data = {
        "title": info.title,
        "created": info.created,
        "system_prompt": info.system_prompt,
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                **({"attachments": [a.as_dict() for a in m.attachments]} if m.attachments else {}),
                "finish_reason": m.finish_reason,
                "stats": m.stats,
                "spans": [s.as_dict() for s in m.spans],
            }
            for m in messages
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=False)


def as_markdown(info: ConversationInfo, messages: list[StoredMessage]) -> str:
    """The conversation as Markdown: the title, the system prompt, each message with a reply's figures line."""
    parts = [f"# {info.title}", ""]
    if info.system_prompt:
        parts += ["**System**", "", info.system_prompt, ""]
    for m in messages:
        parts += [f"**{m.role.capitalize()}**", ""]
        for a in m.attachments:  # each file's text in a fenced block, so its own Markdown stays text
            fence = "`" * max(3, _longest_run(a.text, "`") + 1)
            kept = f", {a.note}" if a.note else ""
            parts += [f"*Attached: {a.name} ({human_size(a.size)}{kept})*", "", fence, block(a), fence, ""]
        parts += [m.content, ""]
        figures = _figures_line(m.stats) if m.role == "assistant" and m.stats else ""
        if figures:
            parts += [f"*{figures}*", ""]
    return "\n".join(parts)


def _longest_run(text: str, char: str) -> int:
    """The longest run of ``char`` in ``text`` (a fence must be longer)."""
    longest = run = 0
    for c in text:
        run = run + 1 if c == char else 0
        longest = max(longest, run)
    return longest


def _figures_line(stats: dict[str, Any]) -> str:
    """A reply's figures as the window shows them: "36.2 tokens/s, acceptance 95%" (what it has of those)."""

    def number(key: str) -> float | None:
        value = stats.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    tps, rate, drafted = number("tokens_per_second"), number("acceptance_rate"), number("drafted")
    parts = [f"{tps:.1f} tokens/s"] if tps else []
    if rate is not None and drafted:
        parts.append(f"acceptance {rate:.0%}")
    return ", ".join(parts)
