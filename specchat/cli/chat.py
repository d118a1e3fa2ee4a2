"""``specchat chat``: one reply streamed to the terminal with each token's fate in colour."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from specchat.cli.sources import OriginCounts, add_source_arguments, sources_from_args
from specchat.core.engine.registry import drafter_entry, drafter_names
from specchat.core.settings import FLAG_LIMITS
from specchat.core.types import (
    DEFAULT_DEPTH,
    GPU_LAYERS_AUTO,
    MAX_DEPTH,
    Drafted,
    DrafterKind,
    Event,
    Finished,
    FinishReason,
    GenerationParams,
    GpuLayers,
    SamplerParams,
    SpecchatError,
    Verified,
    parse_depth,
    parse_gpu_layers,
)

if TYPE_CHECKING:
    from specchat.core.cancel import CancelToken
    from specchat.core.runtime.runtime import Runtime

# ANSI styles; each kind differs by more than hue (underline, strike, bold).
STYLE_ACCEPTED = "\x1b[32;4m"
STYLE_TARGET = "\x1b[1m"
STYLE_REJECTED = "\x1b[31;9m"
RESET = "\x1b[0m"


def gpu_layers_arg(text: str) -> GpuLayers:
    """argparse type for ``--n-gpu-layers``: ``auto``, ``all`` or a number."""
    try:
        return parse_gpu_layers(text)
    except SpecchatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def rpc_servers_arg(text: str) -> tuple[str, ...]:
    """argparse type for ``--rpc``: ``HOST:PORT[,HOST:PORT...]``."""
    from specchat.core.remote import parse_servers

    try:
        return parse_servers(text)
    except SpecchatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_rpc_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rpc`` and its deadline: the target's layers on other machines' devices (``specchat serve-rpc``)."""
    from specchat.core.remote import DEFAULT_DEADLINE

    parser.add_argument(
        "--rpc",
        type=rpc_servers_arg,
        default=(),
        metavar="HOST:PORT[,HOST:PORT...]",
        help="put the target's layers on these 'specchat serve-rpc' servers (the draft stays here)",
    )
    parser.add_argument(
        "--rpc-timeout",
        type=float,
        default=DEFAULT_DEADLINE,
        metavar="SECONDS",
        help=f"a remote server silent this long counts as stopped (default {DEFAULT_DEADLINE:g})",
    )


def add_model_arguments(
    parser: argparse.ArgumentParser, *, draft_required: bool = False, target_required: bool = True
) -> None:
    """Options shared by ``chat``, ``bench`` and ``serve``: the pair, sampler and limits."""
    parser.add_argument("--target", required=target_required, help="target GGUF file")
    # Not required even for bench: --ngram, outside the group, can be the drafter (see drafter_from_args).
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--draft", help="draft GGUF file (same vocabulary as the target)")
    parser.add_argument(
        "--ngram",
        action="store_true",
        help="draft by n-gram lookup in the conversation (no second model); with --draft or --mtp: "
        "automatic, each round lookup, the model or both, whichever is expected to be fastest",
    )
    group.add_argument(
        "--mtp",
        action="store_true",
        help="draft with the target's own multi-token-prediction (MTP/NextN) heads (no second model)",
    )
    if not draft_required:
        group.add_argument("--no-spec", action="store_true", help="plain decoding with the target alone")
    parser.add_argument(
        "--drafter",
        choices=drafter_names(),
        default=None,
        help="the drafter by name, instead of the flags above (the pair must offer what it needs)",
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--min-p", type=float, default=0.05)
    parser.add_argument("--repeat-penalty", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--n-gpu-layers",
        type=gpu_layers_arg,
        default=GPU_LAYERS_AUTO,
        help="target layers on the GPU: auto (fit free memory; the default), all, or a number",
    )
    parser.add_argument(
        "--draft-gpu-layers",
        type=gpu_layers_arg,
        default=GPU_LAYERS_AUTO,
        help="draft layers on the GPU: auto (the default), all, or a number",
    )
    parser.add_argument(
        "--draft-p-min",
        type=float,
        default=None,
        help="stop drafting below this draft confidence (0: no gate, for every drafter; "
        "default: none, 0.75 for MTP heads)",
    )
    parser.add_argument(
        "--greedy-draft",
        action="store_true",
        help="at temperature > 0, draft the draft's argmax instead of sampling (for comparison)",
    )
    add_rpc_arguments(parser)


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("chat", help="one reply in the terminal, drafted tokens coloured by their fate")
    add_model_arguments(parser)
    parser.add_argument(
        "--depth",
        default="auto" if DEFAULT_DEPTH is None else str(DEFAULT_DEPTH),
        help=f"draft depth 0-{MAX_DEPTH} or 'auto' (default: auto)",
    )
    parser.add_argument("--messages", type=Path, help="JSON file with a list of {role, content} messages")
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--hide-rejected", action="store_true", help="do not show rejected drafts")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    add_source_arguments(parser)
    parser.add_argument("prompt", nargs="?", help="the user message")
    parser.set_defaults(func=cmd_chat)


def sampler_from_args(args: argparse.Namespace) -> SamplerParams:
    return SamplerParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
    )


def drafter_from_args(args: argparse.Namespace) -> str:
    """The drafter ``--drafter`` names, or the one the flags mean: ``--ngram`` with ``--draft`` or ``--mtp`` is the
    automatic (composite) one."""
    if getattr(args, "drafter", None):
        if getattr(args, "ngram", False) or getattr(args, "no_spec", False):
            raise SpecchatError("--drafter names the drafter: give it without --ngram or --no-spec")
        return drafter_entry(args.drafter).name
    model = bool(getattr(args, "mtp", False) or getattr(args, "draft", None))
    if getattr(args, "ngram", False):
        if getattr(args, "no_spec", False):
            raise SpecchatError("--ngram drafts and --no-spec does not: give one of them")
        return DrafterKind.COMPOSITE if model else DrafterKind.NGRAM
    if getattr(args, "mtp", False):
        return DrafterKind.MTP
    if getattr(args, "draft", None):
        return DrafterKind.DRAFT_MODEL
    if not hasattr(args, "no_spec"):  # bench: there is no plain-only run
        raise SpecchatError("give a drafter: --draft PATH, --ngram or --mtp (--ngram with either: automatic)")
    return DrafterKind.NONE


def load_runtime(args: argparse.Namespace) -> Runtime:
    from specchat.core.runtime.runtime import Runtime  # imported here: it loads llama.cpp

    if not math.isfinite(args.rpc_timeout) or args.rpc_timeout <= 0:
        raise SpecchatError(f"--rpc-timeout must be a positive number of seconds, got {args.rpc_timeout}")
    return Runtime.load(
        args.target,
        args.draft,
        n_ctx=args.ctx,
        n_gpu_layers=args.n_gpu_layers,
        draft_gpu_layers=args.draft_gpu_layers,
        n_threads=args.threads,
        rpc_servers=args.rpc,
        rpc_deadline=args.rpc_timeout,
    )


def check_threads(value: int | None) -> None:
    """One-line error for a thread count outside 1 to this machine's CPUs (more only wait on each other)."""
    cpus = os.cpu_count() or 1
    if value is not None and not 1 <= value <= cpus:
        raise SpecchatError(f"threads must be between 1 and {cpus} (this machine's CPUs), got {value}")


def params_from_args(args: argparse.Namespace) -> GenerationParams:
    """The generation parameters from the flags, every number finite and in range (one-line errors)."""
    check_threads(getattr(args, "threads", None))
    for name, limit in FLAG_LIMITS.items():
        value = getattr(args, name, None)
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecchatError(f"{limit.label} must be a finite number, got {value}")
    params = GenerationParams(
        sampler=sampler_from_args(args),
        max_tokens=args.max_tokens,
        stop_strings=tuple(getattr(args, "stop", ())),
        seed=args.seed,
        draft_p_min=args.draft_p_min,
        greedy_draft=args.greedy_draft,
    )
    for name, limit in FLAG_LIMITS.items():
        value = getattr(args, name, None)
        if value is not None:
            limit.check(value)
    return params


def read_messages(args: argparse.Namespace) -> list[dict[str, str]]:
    """The conversation from ``--messages``, the prompt argument or standard input, validated."""
    from specchat.core.runtime.template import validate_messages

    if args.messages is not None:
        data = _load_messages_file(args.messages)
        if args.prompt:
            data.append({"role": "user", "content": args.prompt})
    elif args.prompt is None:
        if sys.stdin.isatty():
            raise SpecchatError("give a prompt, --messages FILE, or pipe the prompt on standard input")
        try:
            data = [{"role": "user", "content": sys.stdin.read()}]
        except UnicodeDecodeError:
            raise SpecchatError("standard input is not UTF-8 text") from None
    else:
        data = [{"role": "user", "content": args.prompt}]
    validate_messages(data)
    return data


def _load_messages_file(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecchatError(f"messages file not found: {path}") from None
    except OSError as exc:
        raise SpecchatError(f"cannot read messages file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SpecchatError(f"messages file is not UTF-8 text: {path}") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise SpecchatError(f"messages file is nested too deeply to read: {path}") from None
    except ValueError as exc:
        raise SpecchatError(f"messages file is not valid JSON: {path}: {exc}") from None
    if isinstance(data, dict) and "messages" in data:
        data = data["messages"]
    if not isinstance(data, list):
        raise SpecchatError("messages file must hold a JSON list of {role, content} objects")
    return data


def cancel_on_sigint(cancel: CancelToken) -> None:
    """Ctrl-C cancels the reply between rounds instead of killing the process."""

    def handler(signum: int, frame: object) -> None:
        cancel.cancel()

    signal.signal(signal.SIGINT, handler)


def cmd_chat(args: argparse.Namespace) -> int:
    from specchat.core.cancel import CancelToken
    from specchat.core.engine.depth import DepthControl

    depth = parse_depth(args.depth)
    params = params_from_args(args)
    files = sources_from_args(args)
    messages = read_messages(args)
    if files.documents:
        if messages[-1]["role"] != "user":
            raise SpecchatError("--attach puts the files into a user message: end the conversation with one")
        messages[-1] = {**messages[-1], "content": files.message(messages[-1]["content"])}
    runtime = load_runtime(args)
    ends_with_user = messages[-1]["role"] == "user"
    from specchat.core.runtime.conversation import Conversation

    session = Conversation(runtime, messages[:-1] if ends_with_user else messages)
    cancel = CancelToken()
    origins = OriginCounts()
    events = origins.watch(
        session.reply(
            messages[-1]["content"] if ends_with_user else None,
            params,
            drafter=drafter_from_args(args),
            depth=DepthControl(depth),
            cancel=cancel,
            sources=files.sources,
        )
    )
    # Only now: until the prompt is rendered, Ctrl-C interrupts at once; from here it ends the reply cleanly.
    cancel_on_sigint(cancel)
    if args.json:
        finished = _drain(events)
        print(
            json.dumps(
                {
                    "prompt_text": session.last_prompt_text,
                    "tokens": session.last_tokens,
                    "text": session.messages[-1]["content"],
                    "finish_reason": finished.reason.value,
                    "message": finished.message,
                    "stats": finished.stats.as_dict(),
                    "by_source": finished.stats.source_dict(),
                    "by_text": origins.as_dict(),
                    "placement": dict(zip(("target", "draft"), runtime.placement(), strict=True)),
                },
                ensure_ascii=False,
            )
        )
    else:
        finished = stream_to_terminal(events, sys.stdout, hide_rejected=args.hide_rejected, colour=sys.stdout.isatty())
        print(summary_line(finished, runtime.placement()), file=sys.stderr)
        for name, counts in origins.as_dict().items():
            print(f"drafted from {name}: {counts['accepted']}/{counts['drafted']} accepted", file=sys.stderr)
    # A reply ends in an error only through a SpecchatError (a lost server, say): expected, so exit 2.
    return 2 if finished.reason is FinishReason.ERROR else 0


def _drain(events: Iterator[Event]) -> Finished:
    for event in events:
        if isinstance(event, Finished):
            return event
    raise SpecchatError("the engine stopped without finishing")  # pragma: no cover


def stream_to_terminal(events: Iterator[Event], out: TextIO, *, hide_rejected: bool, colour: bool) -> Finished:
    """Print the reply as it is verified; rejected drafts appear struck through in place."""
    for event in events:
        if isinstance(event, Drafted):
            continue  # terminals cannot take text back cheaply; show verdicts only
        if isinstance(event, Verified):
            parts = []
            acc = "".join(event.accepted_pieces)
            rej = "".join(event.rejected_pieces)
            if colour:
                if acc:
                    parts.append(STYLE_ACCEPTED + acc + RESET)
                if rej and not hide_rejected:
                    parts.append(STYLE_REJECTED + rej + RESET)
                if event.correction_piece:
                    parts.append(STYLE_TARGET + event.correction_piece + RESET)
            else:
                parts = [acc, event.correction_piece]
            out.write("".join(parts))
            out.flush()
        elif isinstance(event, Finished):
            out.write("\n")
            if event.message:
                print(f"specchat: {event.reason.value}: {event.message}", file=sys.stderr)
            return event
    raise SpecchatError("the engine stopped without finishing")  # pragma: no cover


def summary_line(finished: Finished, placement: tuple[str, str | None] | None = None) -> str:
    s = finished.stats
    where = ""
    if placement is not None:
        target, draft = placement
        where = f"; target on {target}" + (f", draft on {draft}" if draft else "")
    return (
        f"[{finished.reason.value}] {s.generated} tokens, {s.tokens_per_second:.1f} tok/s, "
        f"acceptance {s.acceptance_rate:.0%} ({s.accepted}/{s.drafted}), "
        f"{s.mean_accepted_per_round:.2f} accepted/round over {s.rounds} rounds{where}"
    )
