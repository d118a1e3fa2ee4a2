"""``specchat chat``: one reply streamed to the terminal."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("chat", help="chat with a target (and draft) model in the terminal")
    parser.set_defaults(func=lambda args: 0)
