"""Engine events folded into OpenAI bodies and stream chunks, with ``usage`` and a ``speculative`` object.

Streamed text is released only once it cannot be the start of a stop string
or (with tools) of a tool call; what is held back comes out at the end, after
the tool calls have been read out of the whole reply.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from specchat.core.chat.baseline import reply_speedup
from specchat.core.chat.transcript import ReplyFigures
from specchat.core.types import PREDICTION_NAME, Finished, FinishReason, Verified
from specchat.server.protocol import Request
from specchat.server.request_queue import PairInfo, Started
from specchat.server.tool_calls import ToolCall, held_for_stops, parse_tool_calls, releasable

_FINISH = {
    FinishReason.EOS: "stop",
    FinishReason.STOP_STRING: "stop",
    FinishReason.MAX_TOKENS: "length",
    FinishReason.CONTEXT_FULL: "length",
    FinishReason.CANCELLED: "stop",
    FinishReason.ERROR: "stop",
}


def fates_of(event: Verified) -> list[dict[str, Any]]:
    """Each token of one round with its fate: accepted or rejected draft (and who drafted it), or the target's.

    A draft a lookup took from a text beside the conversation (the prediction) also names that text: ``"origin":
    "the prediction"``.
    """
    out: list[dict[str, Any]] = []
    sources = [s.value for s in event.sources]
    drafted = [*zip(event.accepted, event.accepted_pieces, strict=False)]
    n = len(drafted)
    drafted += zip(event.rejected, event.rejected_pieces, strict=False)
    for i, (token, piece) in enumerate(drafted):
        fate: dict[str, Any] = {
            "token": token,
            "text": piece,
            "fate": "accepted" if i < n else "rejected",
            "source": _at(sources, i),
        }
        origin = _at(list(event.origins), i)
        if origin:
            fate["origin"] = origin
        out.append(fate)
    if event.correction is not None:
        out.append({"token": event.correction, "text": event.correction_piece, "fate": "target", "source": None})
    return out


def _at(items: list[str], i: int) -> str | None:
    return items[i] if i < len(items) else None


class Reply:
    """One request's reply as it streams: text released so far, figures, and the final body."""

    def __init__(self, request: Request, info: PairInfo, started: Started) -> None:
        self.request = request
        self.info = info
        self.started = started
        self.id = ("chatcmpl-" if request.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.figures = ReplyFigures()
        self.texts: list[str] = []
        self.released = ""
        self.tool_names = [t["function"]["name"] for t in request.tools]
        self.finished: Finished | None = None
        self.content = ""
        self.tool_calls: list[ToolCall] = []
        self.prediction = [0, 0]  # drafts taken from the prediction: accepted, rejected

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def add(self, event: Verified) -> str:
        """Fold one verified round; the text it lets out (possibly empty)."""
        self.figures.fold([event])
        self.texts.append(event.text)
        accepted, rejected = event.drafted_from(PREDICTION_NAME)
        self.prediction[0] += accepted
        self.prediction[1] += rejected
        full = self.text
        end = len(full) - held_for_stops(full, self.request.params.stop_strings)
        if self.tool_names:
            end = min(end, releasable(full))
        if end <= len(self.released):
            return ""
        delta = full[len(self.released) : end]
        self.released = full[:end]
        return delta

    def finish(self, event: Finished) -> str:
        """Fold the end; the held-back content still to send."""
        self.figures.fold([event])
        self.finished = event
        full = self.text
        if event.reason is FinishReason.STOP_STRING:
            stops = self.request.params.stop_strings
            cuts = [at for at in (full.find(s) for s in stops) if at >= 0]
            # A stop string begun in an earlier round: the engine cut its end, its beginning is still here.
            full = full[: min(cuts)] if cuts else full[: len(full) - held_for_stops(full, stops)]
        self.content, self.tool_calls = parse_tool_calls(full, self.tool_names) if self.tool_names else (full, [])
        if not self.content.startswith(self.released):
            return ""
        return self.content[len(self.released) :]

    def finish_reason(self, timed_out: bool) -> str:
        if self.tool_calls:
            return "tool_calls"
        if timed_out:
            return "length"
        return _FINISH[self.finished.reason] if self.finished is not None else "stop"

    def usage(self) -> dict[str, Any]:
        stats = self.finished.stats if self.finished is not None else None
        completion = stats.generated if stats is not None else self.figures.generated
        reused = stats.reused_prompt_tokens if stats is not None else 0
        prompt = self.started.prompt_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": reused},
        }
        if self.request.prediction is not None:  # as OpenAI reports a predicted output: its drafted tokens
            usage["completion_tokens_details"] = {
                "accepted_prediction_tokens": self.prediction[0],
                "rejected_prediction_tokens": self.prediction[1],
            }
        return usage

    def speculative(self, timed_out: bool) -> dict[str, Any]:
        """The speculative figures: drafted, accepted, rounds, by source, and the measured speed-up."""
        f = self.figures
        stats = self.finished.stats if self.finished is not None else None
        tps = stats.tokens_per_second if stats is not None else 0.0
        plain = stats.plain_tokens_per_second if stats is not None else 0.0
        shown = reply_speedup(f.generated, f.passes, tps, plain, stats.plain_tokens if stats is not None else 0)
        out: dict[str, Any] = {
            "drafter": self.started.drafter,
            "depth": "auto" if self.request.spec.depth is None else self.request.spec.depth,
            "drafted": f.drafted,
            "accepted": f.accepted,
            "rounds": f.rounds,
            "passes": f.passes,
            "acceptance_rate": round(f.acceptance_rate, 4),
            "mean_accepted_per_round": round(f.mean_accepted_per_round, 3),
            "by_source": {name: {"drafted": d, "accepted": a} for name, (d, a) in sorted(f.by_source.items())},
            "tokens_per_second": round(tps, 2),
            "plain_tokens_per_second": round(plain, 2),
            "speedup": None if shown.ratio is None else round(shown.ratio, 3),
            "speedup_note": shown.why,
            "prompt_seconds": round(stats.prompt_seconds, 4) if stats is not None else 0.0,
            "reused_prompt_tokens": stats.reused_prompt_tokens if stats is not None else 0,
            "queued_seconds": round(self.started.queued_seconds, 4),
        }
        if timed_out:
            out["stopped"] = "time_limit"
        return out

    def body(self, timed_out: bool) -> dict[str, Any]:
        """The whole non-streaming response."""
        reason = self.finish_reason(timed_out)
        if self.request.kind == "chat":
            message: dict[str, Any] = {
                "role": "assistant",
                "content": self.content or None if self.tool_calls else self.content,
            }
            if self.tool_calls:
                message["tool_calls"] = [c.as_dict() for c in self.tool_calls]
            choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": self.content, "logprobs": None, "finish_reason": reason}
            kind = "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.info.model_id,
            "system_fingerprint": None,
            "choices": [choice],
            "usage": self.usage(),
            "speculative": self.speculative(timed_out),
        }

    def chunk(
        self,
        *,
        text: str = "",
        role: bool = False,
        fates: list[dict[str, Any]] | None = None,
        finish_reason: str | None = None,
        tool_calls: list[ToolCall] | None = None,
    ) -> dict[str, Any]:
        """One stream chunk (``fates``: the extension field, per token of the round)."""
        if self.request.kind == "chat":
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if text or (role and not tool_calls):
                delta["content"] = text
            if tool_calls:
                delta["tool_calls"] = [c.as_dict(i) for i, c in enumerate(tool_calls)]
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            kind = "text_completion"
        if fates is not None:
            choice["specchat_fates"] = fates
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.info.model_id,
            "system_fingerprint": None,
            "choices": [choice],
        }

    def usage_chunk(self, timed_out: bool) -> dict[str, Any]:
        """The last chunk with ``stream_options.include_usage``: no choices, the usage and speculative figures."""
        kind = "chat.completion.chunk" if self.request.kind == "chat" else "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.info.model_id,
            "system_fingerprint": None,
            "choices": [],
            "usage": self.usage(),
            "speculative": self.speculative(timed_out),
        }
