"""Chat prompts from the GGUF's own chat template, rendered in a sandboxed, budgeted Jinja.

llama-cpp-python has an equivalent formatter (``Jinja2ChatFormatter``), but
this package must not import llama_cpp; the renderer below mirrors it
(ImmutableSandboxedEnvironment, trim/lstrip blocks, loop controls, tojson,
raise_exception, strftime_now) in a few lines of jinja2.

A template comes from a downloaded file, so one render may spend only so much
(``RenderLimits``): every ``{% for %}`` item and ``range()`` counts against an
iteration budget, nested calls (a macro calling itself) against a depth
budget, the output and any string or number it builds against a size budget,
and all of it against a deadline. Whatever goes wrong, including Python errors
such as ``1/0``, becomes a one-line SpecchatError.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from specchat.core.types import SpecchatError

# Used when a GGUF carries no template: ChatML, which most small instruct models understand.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

ROLES = frozenset({"system", "user", "assistant"})

TOOLS_SYSTEM_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": '
    "<args-json-object>}}\n</tool_call>"
)


@dataclass(frozen=True)
class RenderLimits:
    """What one render may spend before it fails with a one-line error."""

    seconds: float = 5.0
    iterations: int = 1_000_000  # loop items and range() lengths, over the whole render
    call_depth: int = 64  # macros calling macros (or themselves)
    base_chars: int = 1 << 20  # output size: this, plus the two below
    chars_per_input_char: int = 4
    chars_per_message: int = 1024
    int_bits: int = 100_000  # largest number a template may build


class TemplateBudgetError(SpecchatError):
    """A chat template ran past its time, loop, depth or size budget."""


class _Budget:
    """One render's spending; reached through a context variable by the environment's hooks."""

    def __init__(self, limits: RenderLimits, max_chars: int) -> None:
        self.limits = limits
        self.max_chars = max_chars
        self.deadline = time.monotonic() + limits.seconds
        self.iterations = 0
        self.depth = 0
        self.sizes: dict[int, tuple[Any, int]] = {}  # printed sizes of the containers seen (see check_printed)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"the chat template took longer than {self.limits.seconds:g} s; it was stopped")

    def spend(self, n: int) -> None:
        self.iterations += n
        if self.iterations > self.limits.iterations:
            raise TemplateBudgetError(
                f"the chat template looped more than {self.limits.iterations:,} times; it was stopped"
            )

    def iterate(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for n, item in enumerate(iterable):
            self.spend(1)
            if n & 0x3FF == 0x3FF:
                self.check_time()
            yield item

    def check_size(self, value: Any) -> Any:
        if isinstance(value, (str, list, tuple, dict)) and len(value) > self.max_chars:
            raise TemplateBudgetError(
                f"the chat template built a value of {len(value):,} items, over its budget of {self.max_chars:,}"
            )
        if isinstance(value, int) and value.bit_length() > self.limits.int_bits:
            raise TemplateBudgetError("the chat template built a number too large to print")
        return value

    def check_arguments(self, args: Iterable[Any]) -> None:
        for value in args:
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.max_chars:
                raise TemplateBudgetError(f"the chat template asked for a size of {value:,}, over its budget")
            self.check_printed(value)

    def check_printed(self, value: Any) -> Any:
        """``value``, unless printing it (``str``, ``tojson``, sorting it...) would pass the size budget.

        A list can hold the same big list 300,000 times for the price of 300,000 pointers, so its
        length says nothing: the printed size is estimated first (at least a character per item),
        stopping as soon as it passes the budget, each container sized once per render.
        """
        if isinstance(value, (list, tuple, dict, set, frozenset, Namespace)):
            if self.printed_size(value, 0) > self.max_chars:
                raise TemplateBudgetError(
                    f"the chat template would print a value of over {self.max_chars:,} characters; it was stopped"
                )
        return value

    def printed_size(self, value: Any, depth: int) -> int:
        """A low estimate of ``len(str(value))``, capped just past the budget."""
        if isinstance(value, str):
            return len(value)
        if isinstance(value, bool) or value is None:
            return 4
        if isinstance(value, int):
            return value.bit_length() * 3 // 10 + 1
        if not isinstance(value, (list, tuple, dict, set, frozenset, Namespace)):
            return 1
        known = self.sizes.get(id(value))
        if known is not None and known[0] is value and not isinstance(value, Namespace):
            return known[1]
        if depth > _MAX_NESTING:
            raise TemplateBudgetError(f"the chat template built a value nested over {_MAX_NESTING} deep")
        items: Iterable[Any]
        if isinstance(value, Namespace):
            items = object.__getattribute__(value, "_Namespace__attrs").items()
        else:
            items = value.items() if isinstance(value, dict) else value
        total = 2
        for item in items:
            parts = item if isinstance(value, (dict, Namespace)) else (item,)
            total += 2 + sum(self.printed_size(part, depth + 1) for part in parts)
            if total > self.max_chars:
                break
        if len(self.sizes) >= _MAX_SIZED:
            self.sizes.clear()
        self.sizes[id(value)] = (value, total)  # the value is kept, so its id names no other object this render
        return total


_MAX_NESTING = 200  # containers inside containers, for the printed-size estimate
_MAX_SIZED = 100_000  # containers whose printed size one render remembers
_MAX_JSON_INDENT = 16
_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("specchat_template_budget", default=None)
_PERCENT_WIDTH_RE = re.compile(r"%[-#0 +]*(\d+)?(?:\.(\d+))?")


class _BudgetCodeGenerator(CodeGenerator):
    """Compiles every ``{% for %}`` iterable as ``environment.budget_iter(<iterable>)``."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:  # noqa: N802 - jinja2 dispatches on the node class name
        wrapped = node.iter
        if not (
            isinstance(wrapped, nodes.Call)
            and isinstance(wrapped.node, nodes.EnvironmentAttribute)
            and wrapped.node.name == "budget_iter"
        ):
            node.iter = nodes.Call(
                nodes.EnvironmentAttribute("budget_iter"), [wrapped], [], None, None, lineno=node.lineno
            )
        super().visit_For(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:  # noqa: N802 - as above
        """``a ~ b`` prints both: each operand goes through ``environment.budget_printed`` first."""
        node.nodes = [
            n
            if isinstance(n, nodes.Call)
            and isinstance(n.node, nodes.EnvironmentAttribute)
            and n.node.name == "budget_printed"
            else nodes.Call(nodes.EnvironmentAttribute("budget_printed"), [n], [], None, None, lineno=n.lineno)
            for n in node.nodes
        ]
        super().visit_Concat(node, frame)


class BudgetedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every loop, call, size-changing operator and output chunk metered."""

    code_generator_class = _BudgetCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, finalize=_finalize, **kwargs)
        self.globals["range"] = _counted_range
        self.filters = {name: _metered(f, percent_format=name == "format") for name, f in self.filters.items()}

    def budget_iter(self, iterable: Any) -> Any:
        budget = _BUDGET.get()
        return iterable if budget is None else budget.iterate(iterable)

    def budget_printed(self, value: Any) -> Any:
        budget = _BUDGET.get()
        return value if budget is None else budget.check_printed(value)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja2's own signature for call()
        budget = _BUDGET.get()
        if budget is None:
            return super().call(__context, __obj, *args, **kwargs)
        budget.check_time()
        budget.check_arguments(args)
        budget.check_arguments(kwargs.values())
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            _check_growth(budget, getattr(__obj, "__name__", ""), owner, args, kwargs)
        if budget.depth >= budget.limits.call_depth:
            raise TemplateBudgetError(
                f"the chat template nested calls more than {budget.limits.call_depth} deep (a macro calling itself?)"
            )
        budget.depth += 1
        try:
            return budget.check_size(super().call(__context, __obj, *args, **kwargs))
        finally:
            budget.depth -= 1

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.check_time()
            _check_binop(budget, operator_, left, right)
            return budget.check_size(self.binop_table[operator_](left, right))
        return self.binop_table[operator_](left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        widths = list(_format_widths(value.__self__))
        metered = _metered(wrapped)

        def checked(*args: Any, **kwargs: Any) -> str:
            budget = _BUDGET.get()
            if budget is not None:
                _check_widths(budget, widths)
            result: str = metered(*args, **kwargs)
            return result

        return checked

    def getattr(self, obj: Any, attribute: str) -> Any:
        value = super().getattr(obj, attribute)
        budget = _BUDGET.get()
        return value if budget is None else budget.check_size(value)

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        budget = _BUDGET.get()
        if budget is not None:
            budget.check_time()
        return value


def _check_binop(budget: _Budget, op: str, left: Any, right: Any) -> None:
    """Refuse, before computing it, a result that would blow the size budget."""
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > budget.max_chars:
                raise TemplateBudgetError(f"the chat template repeated a value {n:,} times, over its budget")
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and left.bit_length() + right.bit_length() > budget.limits.int_bits
        ):
            raise TemplateBudgetError("the chat template built a number too large to print")
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if right * math.log2(abs(left)) > budget.limits.int_bits:
                raise TemplateBudgetError("the chat template built a number too large to print")
    elif op == "+":
        if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            if len(left) + len(right) > budget.max_chars:
                raise TemplateBudgetError("the chat template built a string over its size budget")
    elif op == "%" and isinstance(left, str):
        _check_widths(budget, (n for pair in _PERCENT_WIDTH_RE.findall(left) for n in pair))
        budget.check_arguments(right if isinstance(right, tuple) else (right,))  # '%*d' % (10**9, 1) too


def _check_widths(budget: _Budget, numbers: Iterable[str]) -> None:
    """Refuse a format field wider than the size budget (``'%999999999d'``, ``'{:>999999999}'``)."""
    for number in numbers:
        if number and (len(number) > 9 or int(number) > budget.max_chars):
            raise TemplateBudgetError(f"the chat template asked for a field {number} wide, over its budget")


def _format_widths(text: str) -> Iterator[str]:
    """Every number inside the format specs of a ``str.format`` string."""
    try:
        for _, _, spec, _ in string.Formatter().parse(text):
            yield from re.findall(r"\d+", spec or "")
    except ValueError:  # malformed: str.format itself will say so
        return


def _check_growth(budget: _Budget, name: str, text: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Refuse, before it runs, a string operation whose result would pass the size budget: ``replace``
    with a longer text, ``join`` with a long separator, ``expandtabs`` and ``indent`` with a wide step."""
    size = 0
    try:
        if name in ("replace", "do_replace") and len(args) >= 2:
            old, new = str(args[0]), str(args[1])
            if len(new) > len(old):
                count = text.count(old) if old else len(text) + 1
                limit = args[2] if len(args) > 2 else kwargs.get("count", -1)
                if isinstance(limit, int) and limit >= 0:
                    count = min(count, limit)
                size = len(text) + count * (len(new) - len(old))
        elif name == "join" and args and isinstance(args[0], (list, tuple)):
            size = len(args[0]) * len(text)
        elif name == "expandtabs":
            width = args[0] if args else kwargs.get("tabsize", 8)
            size = len(text) + text.count("\t") * max(int(width), 0)
        elif name == "do_indent":
            width = args[0] if args else kwargs.get("width", 4)
            size = len(text) + (text.count("\n") + 1) * (width if isinstance(width, int) else len(str(width)))
    except (TypeError, ValueError):
        return  # the operation itself will say what is wrong
    if size > budget.max_chars:
        raise TemplateBudgetError(
            f"the chat template's {name.removeprefix('do_')} would build {size:,} characters, over its budget"
        )


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}`` is printed: its size is checked first."""
    budget = _BUDGET.get()
    return value if budget is None else budget.check_printed(value)


def _counted_range(*args: int) -> range:
    """``range`` whose length is spent from the iteration budget as it is made."""
    rng = range(*args)
    budget = _BUDGET.get()
    if budget is not None:
        budget.spend(len(rng))
    return rng


def _metered(f: Callable[..., Any], *, percent_format: bool = False) -> Callable[..., Any]:
    """A filter (or ``str.format``) whose numeric arguments, widths and result are held to the size budget."""

    name = getattr(f, "__name__", "")

    @functools.wraps(f)
    def metered(*args: Any, **kwargs: Any) -> Any:
        budget = _BUDGET.get()
        if budget is None:
            return f(*args, **kwargs)
        budget.check_time()
        budget.check_arguments(args)
        budget.check_arguments(kwargs.values())
        values = args[1:] if args and isinstance(args[0], (EvalContext, Context, jinja2.Environment)) else args
        if values and isinstance(values[0], str):
            _check_growth(budget, name, values[0], values[1:], kwargs)
        elif name == "do_join" and values and isinstance(values[0], (list, tuple)):
            _check_growth(budget, "join", str(values[1] if len(values) > 1 else kwargs.get("d", "")), (values[0],), {})
        elif name == "_tojson" and (kwargs.get("indent") or 0) > _MAX_JSON_INDENT:
            raise TemplateBudgetError(
                f"the chat template asked for a JSON indent of {kwargs['indent']}, over {_MAX_JSON_INDENT}"
            )
        if percent_format and args and isinstance(args[0], str):
            _check_widths(budget, (n for pair in _PERCENT_WIDTH_RE.findall(args[0]) for n in pair))
        return budget.check_size(f(*args, **kwargs))

    return metered


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise SpecchatError(f"chat template refused the conversation: {message}")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ChatTemplate:
    """A compiled chat template plus the special-token strings it refers to."""

    def __init__(
        self, source: str | None, *, bos_token: str = "", eos_token: str = "", limits: RenderLimits | None = None
    ) -> None:
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.limits = limits or RenderLimits()
        env = BudgetedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = _metered(_tojson)
        # Compiling folds constants (``'x'|center(10**9)``) by calling filters: meter that too. A filter
        # refused here is left to run at render time, where the same budget refuses it again.
        token = _BUDGET.set(_Budget(self.limits, self.limits.base_chars))
        try:
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise SpecchatError(f"the model's chat template does not compile: {_one_line(str(exc))}") from None
        except (RecursionError, MemoryError, ValueError, TypeError) as exc:
            raise SpecchatError(
                f"the model's chat template does not compile: {type(exc).__name__}: {_one_line(str(exc))}"
            ) from None
        finally:
            _BUDGET.reset(token)

    @property
    def uses_tools(self) -> bool:
        """Whether the template renders a ``tools`` variable itself."""
        return template_uses_tools(self.source)

    def render(
        self,
        messages: Sequence[dict[str, str]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] | None = None,
        checked: bool = False,
    ) -> str:
        """The prompt text for ``messages``; raises a one-line SpecchatError on any failure or overspend.

        ``tools`` (OpenAI function definitions) are handed to the template as its ``tools`` variable.
        ``checked``: the caller ran :func:`validate_messages` on ``messages`` already.
        """
        if not checked:
            validate_messages(messages)
        limits = self.limits
        input_chars = sum(len(m["content"]) for m in messages) + (len(json.dumps(list(tools))) if tools else 0)
        budget = _Budget(
            limits,
            limits.base_chars + limits.chars_per_input_char * input_chars + limits.chars_per_message * len(messages),
        )
        token = _BUDGET.set(budget)
        try:
            parts: list[str] = []
            size = 0
            for chunk in self._template.generate(
                messages=[dict(m) for m in messages],
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                add_generation_prompt=add_generation_prompt,
                raise_exception=_raise,
                strftime_now=lambda fmt: datetime.now().strftime(fmt),
                **({"tools": [dict(t) for t in tools]} if tools else {}),
            ):
                size += len(chunk)
                if size > budget.max_chars:
                    raise TemplateBudgetError(
                        f"the chat template's output passed {budget.max_chars:,} characters; it was stopped"
                    )
                budget.check_time()
                parts.append(chunk)
        except SpecchatError:
            raise
        except jinja2.TemplateError as exc:
            raise SpecchatError(f"the chat template failed: {_one_line(str(exc))}") from None
        except RecursionError:
            raise SpecchatError("the chat template failed: it recursed too deeply") from None
        except MemoryError:
            raise SpecchatError("the chat template failed: it ran out of memory") from None
        except Exception as exc:  # noqa: BLE001 - a template is foreign code: 1/0, int('x'), a bad attribute...
            raise SpecchatError(f"the chat template failed: {type(exc).__name__}: {_one_line(str(exc))}") from None
        finally:
            _BUDGET.reset(token)
        text = "".join(parts)
        if not text.strip():
            raise SpecchatError("the chat template rendered an empty prompt for this conversation")
        return text


def validate_messages(messages: Sequence[dict[str, str]]) -> None:
    """Raise a one-line error naming what is wrong with an empty or malformed message list."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise SpecchatError(f"the conversation must be a list of messages, got {type(messages).__name__}")
    if not messages:
        raise SpecchatError("the conversation is empty: give at least one message")
    for i, m in enumerate(messages, 1):
        if not isinstance(m, dict):
            raise SpecchatError(f'message {i} must be an object {{"role": ..., "content": ...}}, got {_short(m)}')
        role = m.get("role")
        if role not in ROLES:
            got = "no role" if "role" not in m else f"role {_short(role)}"
            raise SpecchatError(f"message {i} has {got}; the role must be system, user or assistant")
        content = m.get("content")
        if not isinstance(content, str):
            got = 'no "content"' if "content" not in m else f"content {_short(content)}"
            raise SpecchatError(f"message {i} ({role}) has {got}; the content must be text")
        try:
            content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SpecchatError(
                f"message {i} ({role}) holds text that is not valid Unicode (a lone surrogate at character {exc.start})"
            ) from None


def _short(value: object) -> str:
    text = repr(value)
    return _one_line(text, 60)


def template_uses_tools(template_source: str) -> bool:
    """Whether a chat template renders a ``tools`` variable itself."""
    return re.search(r"\btools\b", template_source) is not None


def tools_in_system(messages: Sequence[dict[str, str]], tools: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """``messages`` with the tool definitions written into the system message (one added if there is none)."""
    text = TOOLS_SYSTEM_PROMPT.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
    out = [dict(m) for m in messages]
    if out and out[0]["role"] == "system":
        out[0]["content"] = out[0]["content"] + "\n\n" + text
    else:
        out.insert(0, {"role": "system", "content": text})
    return out
