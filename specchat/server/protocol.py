"""Reading OpenAI requests: every field checked, anything unsupported refused with a 400 that names it.

A request's JSON becomes a :class:`Request`: the conversation as chat-template
messages (tool calls and tool results written out in the Hermes form, which
the Qwen templates use themselves) or a raw prompt, the tool definitions, the
generation parameters and the speculative options. Nothing here touches the
engine, the disk or the network.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from specchat.core.engine.registry import drafter_names
from specchat.core.types import (
    MAX_DEPTH,
    PREDICTION_NAME,
    GenerationParams,
    SamplerParams,
    SpecchatError,
    TextSource,
)
from specchat.server.errors import ApiError, invalid

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
MAX_TOOLS = 128
MAX_PREDICTION_BYTES = 4 << 20  # as the default body limit: a server allowed larger bodies still takes no more
MAX_PREDICTION_PARTS = 10_000

# Fields that change nothing a local pair can honour differently: accepted and not used.
_NO_EFFECT = frozenset(
    {
        "model",
        "user",
        "metadata",
        "store",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "parallel_tool_calls",
    }
)
_CHAT_FIELDS = (
    frozenset(
        {
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "seed",
            "stop",
            "stream",
            "stream_options",
            "tools",
            "tool_choice",
            "n",
            "logprobs",
            "top_logprobs",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
            "response_format",
            "speculative",
            "repeat_penalty",
            "prediction",
        }
    )
    | _NO_EFFECT
)
_COMPLETION_FIELDS = (
    frozenset(
        {
            "prompt",
            "max_tokens",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "seed",
            "stop",
            "stream",
            "stream_options",
            "n",
            "logprobs",
            "echo",
            "best_of",
            "suffix",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
            "speculative",
            "repeat_penalty",
            "prediction",
        }
    )
    | _NO_EFFECT
)


def drafter_choices() -> dict[str, str | None]:
    """The names ``speculative.drafter`` takes, each with the drafter it means: the registry's (read at the
    call) and ``auto`` (None: the server's default)."""
    return {name: name for name in drafter_names()} | {"auto": None}


@dataclass(frozen=True)
class SpecOptions:
    """The request's ``"speculative"`` object: depth (None: auto), drafter (None: the server's), fates."""

    depth: int | None = None
    drafter: str | None = None
    fates: bool = False


@dataclass(frozen=True)
class Defaults:
    """What a request that does not say gets: the server's command-line sampler and limits."""

    sampler: SamplerParams = field(default_factory=SamplerParams)
    max_tokens_limit: int = 4096  # a request asking for more gets a 400
    plain_probe: int = 0
    draft_p_min: float | None = None
    depth: int | None = None  # None: auto


@dataclass(frozen=True)
class Request:
    """One checked request, ready for the engine."""

    kind: Literal["chat", "completion"]
    params: GenerationParams
    stream: bool = False
    include_usage: bool = False
    messages: tuple[dict[str, str], ...] = ()
    prompt: str = ""
    tools: tuple[dict[str, Any], ...] = ()
    spec: SpecOptions = field(default_factory=SpecOptions)
    prediction: str | None = None  # the predicted output's text (OpenAI's ``prediction``), drafted from by lookup

    def sources(self) -> tuple[TextSource, ...]:
        """The texts the reply drafts from: the prediction, where one was sent."""
        if not self.prediction:
            return ()
        return (TextSource(PREDICTION_NAME, self.prediction, "prediction"),)


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what is wrong with it."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise invalid("the request body is nested too deeply") from None
    except UnicodeDecodeError:
        raise invalid("the request body is not UTF-8 text") from None
    except ValueError as exc:
        raise invalid(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise invalid(f"the request body must be a JSON object, got {type(data).__name__}")
    return data


def parse_chat(data: dict[str, Any], defaults: Defaults) -> Request:
    """A ``/v1/chat/completions`` body."""
    _refuse_unknown(data, _CHAT_FIELDS)
    data = _given(data)
    _refuse_common(data)
    if data.get("top_logprobs") not in (None, 0):
        raise invalid("top_logprobs is not supported by this server", "top_logprobs", "unsupported_parameter")
    response_format = data.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise invalid('only response_format {"type": "text"} is supported', "response_format", "unsupported_parameter")
    tools = _tools(data.get("tools"))
    choice = data.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise invalid(
            'tool_choice may be "auto" or "none"; forcing a tool is not supported',
            "tool_choice",
            "unsupported_parameter",
        )
    if choice == "none":
        tools = ()
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    param = "max_completion_tokens" if "max_completion_tokens" in data else "max_tokens"
    messages = _messages(data.get("messages"))
    return Request(
        "chat",
        _params(data, defaults, max_tokens, param),
        *_stream(data),
        messages=messages,
        tools=tools,
        spec=_spec(data.get("speculative"), defaults.depth),
        prediction=_prediction(data.get("prediction")),
    )


def parse_completion(data: dict[str, Any], defaults: Defaults) -> Request:
    """A ``/v1/completions`` body: one text prompt, no chat template."""
    _refuse_unknown(data, _COMPLETION_FIELDS)
    data = _given(data)
    _refuse_common(data)
    for name, allowed in (("echo", (None, False)), ("best_of", (None, 1)), ("suffix", (None, ""))):
        if data.get(name) not in allowed:
            raise invalid(f"{name} is not supported by this server", name, "unsupported_parameter")
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise invalid("prompt must be one string (token arrays and several prompts are not supported)", "prompt")
    if not prompt:
        raise invalid("prompt is empty", "prompt")
    _check_text(prompt, "prompt")
    return Request(
        "completion",
        _params(data, defaults, data.get("max_tokens"), "max_tokens"),
        *_stream(data),
        prompt=prompt,
        spec=_spec(data.get("speculative"), defaults.depth),
        prediction=_prediction(data.get("prediction")),
    )


def _given(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without its null fields: to OpenAI clients a null means "not given" (``max_completion_tokens:
    null`` leaves ``max_tokens`` in force)."""
    return {name: value for name, value in data.items() if value is not None}


def _refuse_unknown(data: dict[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise invalid(
            f"unsupported parameter: {unknown[0]}" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
            unknown[0],
            "unsupported_parameter",
        )


def _refuse_common(data: dict[str, Any]) -> None:
    """n > 1, log-probabilities, penalties and logit biases: refused rather than ignored."""
    if data.get("n") not in (None, 1):
        raise invalid("n must be 1: this server makes one choice per request", "n", "unsupported_parameter")
    if data.get("logprobs") not in (None, False, 0):
        raise invalid("logprobs is not supported by this server", "logprobs", "unsupported_parameter")
    for name in ("frequency_penalty", "presence_penalty"):
        if data.get(name) not in (None, 0, 0.0):
            raise invalid(f"{name} is not supported by this server (use repeat_penalty)", name, "unsupported_parameter")
    if data.get("logit_bias") not in (None, {}):
        raise invalid("logit_bias is not supported by this server", "logit_bias", "unsupported_parameter")
    if not isinstance(data.get("model", ""), str):
        raise invalid("model must be a string", "model")


def _stream(data: dict[str, Any]) -> tuple[bool, bool]:
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("stream must be true or false", "stream")
    options = data.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict) or set(options) - {"include_usage", "include_obfuscation"}:
        raise invalid("stream_options may hold only include_usage", "stream_options")
    options = _given(options)
    if not stream:
        raise invalid("stream_options is only allowed with stream: true", "stream_options")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise invalid("stream_options.include_usage must be true or false", "stream_options.include_usage")
    return stream, include


def _number(data: dict[str, Any], name: str, low: float, high: float, *, integer: bool = False) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise invalid(f"{name} must be {'a whole number' if integer else 'a number'}, got {_short(value)}", name)
    # An int is compared as it is: JSON allows 10**400, which no float holds (math.isfinite would overflow).
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        raise invalid(f"{name} must be between {low:g} and {high:g}, got {_short(value)}", name)
    return value


def _params(data: dict[str, Any], defaults: Defaults, max_tokens: Any, max_param: str) -> GenerationParams:
    s = defaults.sampler
    temperature = _number(data, "temperature", 0.0, 2.0)
    top_p = _number(data, "top_p", 0.0, 1.0)
    top_k = _number(data, "top_k", 0, 100_000, integer=True)
    min_p = _number(data, "min_p", 0.0, 0.999)
    repeat_penalty = _number(data, "repeat_penalty", 0.01, 10.0)
    seed = _number(data, "seed", -(2**63), 2**64 - 1, integer=True)
    limit = defaults.max_tokens_limit
    if max_tokens is None:
        n = limit
    else:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise invalid(f"{max_param} must be a whole number, got {_short(max_tokens)}", max_param)
        if not 1 <= max_tokens <= limit:
            raise invalid(
                f"{max_param} must be between 1 and {limit} on this server, got {_short(max_tokens)}", max_param
            )
        n = max_tokens
    try:
        sampler = SamplerParams(
            temperature=s.temperature if temperature is None else float(temperature),
            top_k=s.top_k if top_k is None else int(top_k),
            # top_p 0 means "only the most likely token" to OpenAI clients; the sampler wants (0, 1].
            top_p=s.top_p if top_p is None else max(float(top_p), 1e-6),
            min_p=s.min_p if min_p is None else float(min_p),
            repeat_penalty=s.repeat_penalty if repeat_penalty is None else float(repeat_penalty),
            repeat_last_n=s.repeat_last_n,
        )
        return GenerationParams(
            sampler=sampler,
            max_tokens=n,
            stop_strings=_stops(data.get("stop")),
            seed=None if seed is None else int(seed) % 2**32,
            draft_p_min=defaults.draft_p_min,
            plain_probe=defaults.plain_probe,
        )
    except SpecchatError as exc:
        raise invalid(str(exc)) from None


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid("stop must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise invalid(f"stop takes at most {MAX_STOP_STRINGS} strings of {MAX_STOP_CHARS} characters", "stop")
    for s in stops:
        _check_text(s, "stop")
    return tuple(s for s in stops if s)


def _spec(value: Any, default_depth: int | None) -> SpecOptions:
    if value is None:
        return SpecOptions(default_depth)
    if not isinstance(value, dict):
        raise invalid('speculative must be an object {"depth", "drafter", "fates"}', "speculative")
    value = _given(value)
    unknown = sorted(set(value) - {"depth", "drafter", "fates"})
    if unknown:
        raise invalid(f"unsupported speculative option: {unknown[0]}", f"speculative.{unknown[0]}")
    depth = value.get("depth", default_depth)
    if depth == "auto" or depth is None:
        depth = None
    elif isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
        raise invalid(f'speculative.depth must be 0-{MAX_DEPTH} or "auto", got {_short(depth)}', "speculative.depth")
    drafter = value.get("drafter", "auto")
    choices = drafter_choices()
    if not isinstance(drafter, str) or drafter not in choices:
        raise invalid(
            f"speculative.drafter must be one of {', '.join(choices)}, got {_short(drafter)}", "speculative.drafter"
        )
    fates = value.get("fates", False)
    if not isinstance(fates, bool):
        raise invalid("speculative.fates must be true or false", "speculative.fates")
    return SpecOptions(depth, choices[drafter], fates)


def _prediction(value: Any) -> str | None:
    """OpenAI's predicted output, ``{"type": "content", "content": str | [{"type": "text", "text": str}, ...]}``,
    as its text (None where not sent)."""
    if value is None:
        return None
    shape = '{"type": "content", "content": "..."}'
    if not isinstance(value, dict):
        raise invalid(f"prediction must be an object {shape}, got {_short(value)}", "prediction")
    unknown = sorted(set(value) - {"type", "content"})
    if unknown:
        raise invalid(f"unsupported prediction field: {unknown[0]}", f"prediction.{unknown[0]}")
    if value.get("type") != "content":
        raise invalid(f'prediction.type must be "content", got {_short(value.get("type"))}', "prediction.type")
    content = value.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        if len(content) > MAX_PREDICTION_PARTS:
            raise invalid(
                f"prediction.content has {len(content):,} parts; this server takes at most {MAX_PREDICTION_PARTS:,}",
                "prediction.content",
            )
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise invalid(
                    f'prediction.content[{j}] must be {{"type": "text", "text": "..."}}, got {_short(part)}',
                    f"prediction.content[{j}]",
                )
            texts.append(part["text"])
        text = "".join(texts)
    else:
        raise invalid(
            f"prediction.content must be a string or a list of text parts, got {_short(content)}", "prediction.content"
        )
    _check_text(text, "prediction.content")
    size = len(text.encode("utf-8"))
    if size > MAX_PREDICTION_BYTES:
        raise invalid(
            f"prediction.content is {size:,} bytes; this server takes at most {MAX_PREDICTION_BYTES:,}",
            "prediction.content",
        )
    return text


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise invalid(f"tools must be a list of at most {MAX_TOOLS} tools", "tools")
    out = []
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise invalid(f'tools[{i}] must be {{"type": "function", "function": {{...}}}}', f"tools[{i}]")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(f"tools[{i}].function.name must be a non-empty string", f"tools[{i}].function.name")
        parameters = function.get("parameters", {})
        if not isinstance(parameters, dict):
            raise invalid(
                f"tools[{i}].function.parameters must be a JSON Schema object", f"tools[{i}].function.parameters"
            )
        description = function.get("description", "")
        if not isinstance(description, str):
            raise invalid(f"tools[{i}].function.description must be a string", f"tools[{i}].function.description")
        out.append(
            {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
        )
    return tuple(out)


def _messages(value: Any) -> tuple[dict[str, str], ...]:
    """OpenAI messages as chat-template messages: text only; tool calls and results in the Hermes form."""
    if not isinstance(value, list) or not value:
        raise invalid("messages must be a non-empty list", "messages")
    out: list[dict[str, str]] = []
    for i, message in enumerate(value):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(f"{param} must be an object with role and content", param)
        role = message.get("role")
        content = _content(message.get("content"), f"{param}.content", allow_none=role in ("assistant", "tool"))
        if role in ("system", "developer"):
            out.append({"role": "system", "content": content})
        elif role == "user":
            out.append({"role": "user", "content": content})
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            written = (
                [_written_call(call, f"{param}.tool_calls[{j}]") for j, call in enumerate(calls)]
                if isinstance(calls, list)
                else None
            )
            if written is None:
                raise invalid(f"{param}.tool_calls must be a list", f"{param}.tool_calls")
            out.append({"role": "assistant", "content": "\n".join(([content] if content else []) + written)})
        elif role == "tool":
            response = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + response}
            else:
                out.append({"role": "user", "content": response})
        else:
            raise invalid(
                f"{param}.role must be system, developer, user, assistant or tool, got {_short(role)}", f"{param}.role"
            )
    if out[-1]["role"] != "user":
        raise invalid("the last message must be from the user or a tool", f"messages[{len(value) - 1}].role")
    return tuple(out)


def _content(value: Any, param: str, *, allow_none: bool) -> str:
    if value is None and allow_none:
        return ""
    if isinstance(value, str):
        _check_text(value, param)
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                _check_text(part["text"], f"{param}[{j}].text")
                texts.append(part["text"])
            elif kind in ("image_url", "input_image", "input_audio", "file", "image"):
                raise invalid(
                    f"{param}[{j}]: {kind} content is not supported (this server reads text only)",
                    f"{param}[{j}]",
                    "unsupported_content",
                )
            else:
                raise invalid(f'{param}[{j}] must be {{"type": "text", "text": ...}}', f"{param}[{j}]")
        return "".join(texts)
    raise invalid(f"{param} must be a string or a list of text parts, got {_short(value)}", param)


def _written_call(call: Any, param: str) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise invalid(f'{param} must be {{"type": "function", "function": {{"name", "arguments"}}}}', param)
    arguments = function.get("arguments", "{}")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = arguments  # written back as the client sent it
    return (
        "<tool_call>\n"
        + json.dumps({"name": function["name"], "arguments": parsed}, ensure_ascii=False)
        + "\n</tool_call>"
    )


def _check_text(text: str, param: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{param} holds text that is not valid Unicode", param) from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def method_not_allowed(method: str, path: str) -> ApiError:
    return ApiError(405, f"{method} is not allowed on {path}")
