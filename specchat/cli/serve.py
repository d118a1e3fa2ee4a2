"""``specchat serve``: the loaded pair behind an OpenAI-compatible HTTP server, speculative by default."""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from typing import Any

from specchat.cli.chat import add_model_arguments, drafter_from_args, load_runtime, params_from_args
from specchat.core.engine.registry import drafter_entry
from specchat.core.runtime.prompt_cache import DEFAULT_BUDGET_MIB
from specchat.core.settings import check_api_key
from specchat.core.types import SpecchatError, parse_depth

DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8
DEFAULT_PARALLEL = 1
MAX_PARALLEL = 64
DEFAULT_PROBE_TOKENS = 16  # plain tokens timed after each reply: the speed-up's denominator (0: none)


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("serve", help="an OpenAI-compatible server on 127.0.0.1 with speculative decoding")
    add_model_arguments(parser, target_required=False)
    parser.add_argument("--demo", action="store_true", help="serve the offline demo pair (no --target needed)")
    parser.add_argument("--depth", default="auto", help="default draft depth 0-16 or 'auto'")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("SPECCHAT_API_KEY"),
        help="require 'Authorization: Bearer KEY' (default: $SPECCHAT_API_KEY, else none)",
    )
    parser.add_argument(
        "--queue",
        type=int,
        default=DEFAULT_QUEUE,
        help=f"requests that may wait for the one running (default {DEFAULT_QUEUE}; more get 429)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        help="requests decoded at once in one batch (default 1: one at a time); above 1, requests that draft "
        "with lookup or none share each round, others run alone",
    )
    parser.add_argument("--max-body-mb", type=float, default=4.0, help="largest request body in MiB (default 4)")
    parser.add_argument(
        "--request-timeout", type=float, default=300.0, help="seconds of decoding a request may take (default 300)"
    )
    parser.add_argument(
        "--probe-tokens",
        type=int,
        default=DEFAULT_PROBE_TOKENS,
        help="plain tokens timed after each reply for its measured speed-up (0: none)",
    )
    parser.add_argument(
        "--prompt-cache-mib",
        type=int,
        default=DEFAULT_BUDGET_MIB,
        help="memory for earlier prompts' caches, so a prompt seen before is not read again "
        f"(default {DEFAULT_BUDGET_MIB}; 0: only the previous request's)",
    )
    parser.add_argument("--log-level", choices=("warning", "info", "debug"), default="warning")
    parser.set_defaults(func=cmd_serve, max_tokens=None)


def _check(args: argparse.Namespace) -> None:
    if args.demo and args.target:
        raise SpecchatError("give --demo or --target, not both")
    if not args.demo and not args.target:
        raise SpecchatError("give --target MODEL.gguf (and --draft), or --demo")
    if not 0 <= args.port <= 65535:
        raise SpecchatError(f"--port must be 0-65535, got {args.port}")
    if not 1 <= args.queue <= 1024:
        raise SpecchatError(f"--queue must be 1-1024, got {args.queue}")
    if not 1 <= args.parallel <= MAX_PARALLEL:
        raise SpecchatError(f"--parallel must be 1-{MAX_PARALLEL}, got {args.parallel}")
    if not (math.isfinite(args.max_body_mb) and 0.001 <= args.max_body_mb <= 1024):
        raise SpecchatError(f"--max-body-mb must be between 0.001 and 1024, got {args.max_body_mb}")
    if not (math.isfinite(args.request_timeout) and args.request_timeout > 0):
        raise SpecchatError(f"--request-timeout must be a positive number of seconds, got {args.request_timeout}")
    if not 0 <= args.probe_tokens <= 256:
        raise SpecchatError(f"--probe-tokens must be 0-256, got {args.probe_tokens}")
    if not 0 <= args.prompt_cache_mib <= 1 << 20:
        raise SpecchatError(f"--prompt-cache-mib must be 0-{1 << 20}, got {args.prompt_cache_mib}")
    if args.api_key is not None:
        try:
            check_api_key(args.api_key)
        except SpecchatError as exc:  # a key no HTTP client can send: non-ASCII, spaces, control characters
            given = "$SPECCHAT_API_KEY" if args.api_key == os.environ.get("SPECCHAT_API_KEY") else "--api-key"
            raise SpecchatError(f"{given}: {exc}") from None


def chosen_drafter(args: argparse.Namespace) -> str | None:
    """The default drafter ``--drafter`` or the flags name; None: the best the loaded pair allows (the composite
    with a draft model or heads, lookup alone otherwise)."""
    if not (args.drafter or args.no_spec or args.ngram or args.mtp):
        return None
    return str(drafter_entry(drafter_from_args(args)).key)


def cmd_serve(args: argparse.Namespace) -> int:
    from specchat.core.runtime.batched import BatchedRuntime
    from specchat.server.app import ServerConfig, build_app, is_loopback
    from specchat.server.batch_queue import BatchedRequestQueue
    from specchat.server.protocol import Defaults
    from specchat.server.request_queue import RequestQueue
    from specchat.server.runner import Server, bind, make_server, url_of

    _check(args)
    depth = parse_depth(args.depth)
    if args.demo:
        from specchat.core.models.demo import provision_demo_pair

        pair = provision_demo_pair()
        args.target, args.draft = str(pair.target), str(pair.draft)
    limit = args.max_tokens if args.max_tokens is not None else args.ctx
    args.max_tokens = limit
    params = params_from_args(args)
    sock = bind(args.host, args.port)  # before loading: a taken port fails at once
    runtime = load_runtime(args)
    runtime.prompt_cache.budget = args.prompt_cache_mib << 20
    server: Server | None = None
    batch: BatchedRuntime | None = None

    def stop(sig: int, frame: object) -> None:  # just before uvicorn's own handlers are in place
        if server is not None:
            server.should_exit = True

    try:
        host: RequestQueue
        if args.parallel > 1:
            batch = BatchedRuntime(runtime, args.parallel)
            host = BatchedRequestQueue(batch, queue_size=args.queue, drafter=chosen_drafter(args))
            if not batch.batchable(host.default_drafter):
                print(
                    f"specchat: note: the {host.default_drafter} drafter runs one request at a time; "
                    f"--parallel batches the requests that draft with {', '.join(sorted(batch.drafters))}",
                    file=sys.stderr,
                )
        else:
            host = RequestQueue(runtime, queue_size=args.queue, drafter=chosen_drafter(args))
        config = ServerConfig(
            api_key=args.api_key,
            max_body_bytes=int(args.max_body_mb * (1 << 20)),
            time_limit=args.request_timeout,
            defaults=Defaults(
                sampler=params.sampler,
                max_tokens_limit=limit,
                plain_probe=args.probe_tokens,
                draft_p_min=params.draft_p_min,
                depth=depth,
            ),
            loopback_only_hosts=is_loopback(args.host),
        )
        url = url_of(sock)
        if not is_loopback(args.host):
            print(
                f"specchat: warning: listening on {args.host}: anyone who can reach this machine can use the "
                "models" + ("" if args.api_key else " (no --api-key set)"),
                file=sys.stderr,
            )
        info = host.info
        server = make_server(build_app(host, config), args.log_level)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop)
        print(
            f"specchat serve: {url}/v1 model {info.model_id!r}; target {info.target}"
            + (f", draft {info.draft}" if info.draft else "")
            + f"; drafter {info.default_drafter}"
            + (f"; up to {args.parallel} requests at once" if args.parallel > 1 else "")
            + ("; API key required" if args.api_key else "")
            + "; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        try:
            server.run(sockets=[sock])  # returns once a signal has stopped it, every open request answered
            # Stopped: a further Ctrl-C (or SIGTERM) would only interrupt the cleanup with a traceback, or kill
            # the interpreter as it exits; the engine winds down within one round.
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
        finally:
            host.close()
        print("specchat serve: stopped", file=sys.stderr)
    except KeyboardInterrupt:  # Ctrl-C before the server ran
        print("specchat serve: stopped", file=sys.stderr)
    finally:
        sock.close()
        if batch is not None:
            batch.close()
        runtime.close()
    return 0
