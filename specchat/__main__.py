"""Command line: ``specchat`` opens the window; ``specchat chat|bench|models`` run in the terminal."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from specchat import __version__
from specchat.core.types import SpecchatError

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, like every other specchat error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"specchat: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from specchat.cli import bench, chat, info, models

    parser = OneLineParser(
        prog="specchat",
        description="Local speculative decoding on llama.cpp: a small draft model guesses, the big target checks.",
    )
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    parser.add_argument("--demo", action="store_true", help="open the window with the offline demo pair loaded")
    parser.add_argument("--target", help="open the window with this target GGUF loaded")
    parser.add_argument("--draft", help="and this draft GGUF")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chat.add_parser(sub)
    bench.add_parser(sub)
    models.add_parser(sub)
    info.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from specchat.app import run_gui

            return run_gui(args)
        return int(args.func(args) or 0)
    except SpecchatError as exc:
        print(f"specchat: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
