"""``specchat models ...``: the demo pair, the catalog, hub downloads, the local library, compatibility."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("models", help="provision, find, download and check models")
    msub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    demo = msub.add_parser("demo", help="provision the offline demo pair; print its paths as JSON")
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from specchat.core.models.demo import provision_demo_pair

    pair = provision_demo_pair()
    print(json.dumps({"target": str(pair.target), "draft": str(pair.draft)}))
    return 0
