"""``specchat info``: the version, and what the installed llama.cpp build can do (GPU offload, devices)."""

from __future__ import annotations

import argparse
import json

from specchat import __version__


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("info", help="show the llama.cpp build: GPU offload, devices and their free memory")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    from specchat.core.llama.devices import build_info

    info = build_info()
    if args.json:
        print(json.dumps({"specchat": __version__, **info.to_json()}))
    else:
        print(f"specchat {__version__}")
        for line in info.lines():
            print(line)
    return 0
