"""Command line: ``specchat`` opens the window; ``specchat chat|bench|models|info|serve-rpc`` run in the terminal.

Every failure ends in one line on standard error: an expected one (a
SpecchatError, a file that cannot be read, text that is not Unicode, input
nested too deeply...) as ``specchat: error: ...`` with exit code 2; anything
else as ``specchat: internal error: ...`` naming a log file that holds the
traceback, with exit code 1. A raw traceback never reaches the terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import NoReturn

from specchat import __version__
from specchat.core.remote import TARGET_WORKER_FLAG
from specchat.core.types import SpecchatError

EXIT_USAGE = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130
CRASH_LOG = "crash.log"
_CRASH_LOG_MAX = 1 << 20  # start the log afresh past this size
_MAX_MESSAGE = 500

# What a user can cause and fix: bad files, bad text, bad numbers, input nested too deeply.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (SpecchatError, OSError, ValueError, RecursionError, MemoryError)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, like every other specchat error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"specchat: error: {one_line(message)} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from specchat.cli import bench, chat, info, models, serve_rpc

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
    serve_rpc.add_parser(sub)
    return parser


def one_line(text: str) -> str:
    """``text`` on one printable line: whitespace runs collapsed, lone surrogates escaped, length capped."""
    text = " ".join(str(text).split())
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def describe_error(exc: BaseException) -> str:
    """The one-line message for an expected failure (see EXPECTED_ERRORS)."""
    if isinstance(exc, SpecchatError):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.strerror:
        names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
        text = f"{exc.strerror}: {' -> '.join(names)}" if names else exc.strerror
    elif isinstance(exc, UnicodeError):
        text = f"text that is not valid Unicode ({exc})"
    elif isinstance(exc, RecursionError):
        text = "the input is nested too deeply to read"
    elif isinstance(exc, MemoryError):
        text = "out of memory"
    else:
        text = str(exc) or type(exc).__name__
    return one_line(text or type(exc).__name__)


def write_crash_log(exc: BaseException) -> Path | None:
    """Append ``exc``'s traceback to the crash log in the cache dir (or the temp dir); None if neither works."""
    import tempfile

    from specchat.core import paths

    report = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    header = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} specchat {__version__}: {one_line(' '.join(sys.argv))}\n"
    for folder, name in ((paths.cache_dir, CRASH_LOG), (lambda: Path(tempfile.gettempdir()), f"specchat-{CRASH_LOG}")):
        try:
            path = folder() / name
            mode = "w" if path.exists() and path.stat().st_size > _CRASH_LOG_MAX else "a"
            with path.open(mode, encoding="utf-8", errors="backslashreplace") as f:
                f.write(header + report + "\n")
            return path
        except OSError:
            continue
    return None


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv) == [TARGET_WORKER_FLAG]:
        # The packaged app's own child process for a target on remote devices (it has no ``python -m``).
        from specchat.core.llama.rpc.worker import main as target_worker

        target_worker()
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `specchat models list | head`: the reader left, nothing to say
        _silence_stdout()
        return EXIT_USAGE
    except EXPECTED_ERRORS as exc:
        print(f"specchat: error: {describe_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the last resort: any crash becomes one line and a log file
        log = write_crash_log(exc)
        where = f"the details are in {log}" if log is not None else "no log could be written"
        print(f"specchat: internal error: {type(exc).__name__}: {describe_error(exc)} ({where})", file=sys.stderr)
        return EXIT_INTERNAL


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "rpc", None):
        # Before llama.cpp loads: this process then mostly waits on the target's, and OpenMP threads
        # spinning through the waits here take the CPU from everything else (measured in docs/distributed.md).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.command is None:
        from specchat.app import run_gui

        return run_gui(args)
    return int(args.func(args) or 0)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
