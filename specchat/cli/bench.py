"""``specchat chat``: one reply streamed to the terminal."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="benchmark plain vs speculative decoding")
    parser.set_defaults(func=lambda args: 0)
