"""``specchat info``: the version, and what the installed llama.cpp build can do (GPU offload, devices)."""

from __future__ import annotations

import argparse
import json

from specchat import __version__


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("info", help="show the llama.cpp build: GPU offload, devices and their free memory")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("model", nargs="?", help="also say what kind this GGUF is (dense, hybrid, recurrent) "
                        "and whether it rolls back rejected drafts in place")
    parser.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    from specchat.app import llama_build
    from specchat.core.chat.session import model_memory

    info = llama_build()
    memory = model_memory(args.model) if args.model else None
    if args.json:
        extra = {"model": memory.to_json()} if memory else {}
        print(json.dumps({"specchat": __version__, **info.to_json(), **extra}))
    else:
        print(f"specchat {__version__}")
        for line in info.lines():
            print(line)
        if memory:
            print(f"model: {memory.describe()}")
    return 0
