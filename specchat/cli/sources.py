"""``--attach FILE`` and ``--prediction FILE``: text files a reply drafts from (``chat`` and ``bench``).

An attached file's text goes into the user's message as a fenced document block and is given to lookup as an
attachment; a prediction (the reply as it is expected to be, e.g. the file about to be edited) is given to lookup
only. A file that cannot be read as text is one line (exit 2).
"""

from __future__ import annotations

import argparse
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specchat.core.types import PREDICTION_NAME, Event, SpecchatError, TextSource, Verified

MAX_FILE_BYTES = 16 << 20  # 16 MiB: far beyond what a context holds; a larger file is refused unread


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attach",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a text file put into the message as a document and drafted from by lookup (repeatable)",
    )
    parser.add_argument(
        "--prediction",
        type=Path,
        metavar="FILE",
        help="the reply as it is expected to be (e.g. the file being edited): drafted from by lookup",
    )


def read_text_file(path: Path, what: str) -> str:
    """``path``'s text (UTF-8), or a one-line SpecchatError: missing, not a regular file, over 16 MiB, binary."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except FileNotFoundError:
        raise SpecchatError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise SpecchatError(f"{what} is a directory, not a file: {path}") from None
    except OSError as exc:
        raise SpecchatError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise SpecchatError(f"{what} is a directory, not a file: {path}")
        if not stat.S_ISREG(info.st_mode):
            raise SpecchatError(f"{what} is not a regular file (a device, a pipe or a socket): {path}")
        if info.st_size > MAX_FILE_BYTES:
            raise SpecchatError(f"{what} is {info.st_size / 2**20:.0f} MiB; at most {MAX_FILE_BYTES >> 20} MiB: {path}")
        try:
            data = file.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise SpecchatError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecchatError(f"{what} is over {MAX_FILE_BYTES >> 20} MiB: {path}")
    if b"\0" in data:
        raise SpecchatError(f"{what} is a binary file, not text: {path}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecchatError(f"{what} is not UTF-8 text: {path}") from None


def document_block(name: str, text: str) -> str:
    """``text`` as a fenced document block headed by its name (a fence longer than any backtick run inside)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{name}:\n{fence}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{fence}"


def with_documents(content: str, documents: Iterable[tuple[str, str]]) -> str:
    """The user's message with each document's block after it."""
    blocks = [document_block(name, text) for name, text in documents]
    return "\n\n".join([content, *blocks]) if content else "\n\n".join(blocks)


@dataclass(frozen=True)
class FileSources:
    """What ``--attach`` and ``--prediction`` gave: the documents (name, text) and the reply's drafting sources."""

    documents: tuple[tuple[str, str], ...] = ()
    sources: tuple[TextSource, ...] = ()

    def message(self, content: str) -> str:
        return with_documents(content, self.documents) if self.documents else content


def sources_from_args(args: argparse.Namespace) -> FileSources:
    """Read the files ``--attach`` and ``--prediction`` name (one-line errors)."""
    documents = tuple((path.name, read_text_file(path, "attached file")) for path in getattr(args, "attach", []))
    sources = [TextSource(name, text, "attachment") for name, text in documents]
    prediction = getattr(args, "prediction", None)
    if prediction is not None:
        sources.append(TextSource(PREDICTION_NAME, read_text_file(prediction, "prediction file"), "prediction"))
    return FileSources(documents, tuple(sources))


@dataclass
class OriginCounts:
    """Drafted and accepted tokens per text a lookup drafted from (not the conversation), as events pass."""

    counts: dict[str, list[int]] = field(default_factory=dict)

    def watch(self, events: Iterable[Event]) -> Iterator[Event]:
        for event in events:
            if isinstance(event, Verified):
                for origin in set(event.origins) - {""}:
                    accepted, rejected = event.drafted_from(origin)
                    counts = self.counts.setdefault(origin, [0, 0])
                    counts[0] += accepted + rejected
                    counts[1] += accepted
            yield event

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {name: {"drafted": d, "accepted": a} for name, (d, a) in sorted(self.counts.items())}
