"""``specchat info``: the version, and what the installed llama.cpp build can do (GPU offload, devices)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specchat import __version__
from specchat.cli.chat import rpc_servers_arg


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("info", help="show the llama.cpp build: GPU offload, devices and their free memory")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "model",
        nargs="?",
        help="also say what kind this GGUF is (dense, hybrid, recurrent) "
        "and whether it rolls back rejected drafts in place",
    )
    parser.add_argument(
        "--rpc",
        type=rpc_servers_arg,
        default=(),
        metavar="HOST:PORT[,HOST:PORT...]",
        help="also connect to these 'specchat serve-rpc' servers and list their devices",
    )
    parser.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    from specchat.core.remote import RPC_BUILD_HINT
    from specchat.core.runtime.build import llama_build, model_memory
    from specchat.core.runtime.remote import probe_servers, require_rpc, rpc_available

    info = llama_build()
    memory = model_memory(args.model) if args.model else None
    rpc = rpc_available()
    if args.rpc:
        require_rpc()
    reports = probe_servers(args.rpc) if args.rpc else []
    if args.json:
        extra: dict[str, object] = {"model": memory.to_json()} if memory else {}
        if args.rpc:
            extra["remote"] = [
                {"server": r.server, "error": r.error, "devices": [d.to_json() for d in r.devices]} for r in reports
            ]
        print(json.dumps({"specchat": __version__, **info.to_json(), "rpc": rpc, **extra}))
    else:
        print(f"specchat {__version__}")
        for line in info.lines():
            print(line)
        print("RPC (remote devices): " + ("yes" if rpc else f"no; {RPC_BUILD_HINT}"))
        for report in reports:
            for device in report.devices:
                print(f"remote: {device.summary()}")
        if memory:
            print(f"model: {memory.describe()}")
    for report in reports:
        if report.error:
            print(f"specchat: error: {report.error}", file=sys.stderr)
    return 2 if any(r.error for r in reports) else 0
