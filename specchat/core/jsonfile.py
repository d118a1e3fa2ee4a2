"""Reading back the JSON files specchat keeps (settings, server list, caches, lookup memory).

One boundary for all of them: :func:`read_json` turns a file that cannot be
read, is not UTF-8, is not JSON or is nested deeper than any file specchat
writes into one :class:`UnreadableFileError` line naming the file and what was
wrong, and repairs lone surrogates (which JSON's ``\\ud800`` escapes allow
but UTF-8 cannot hold) in every text, so no caller meets one later when it
writes, prints or shows that text. Each caller then checks the shape it
expects and says what it does instead (defaults, none, a rebuild).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from specchat.core.types import SpecchatError

log = logging.getLogger(__name__)

MAX_DEPTH = 32
"""Nesting allowed in a file read back (specchat writes at most five levels)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


class UnreadableFileError(SpecchatError):
    """A JSON file that could not be read back; ``str(error)`` names the file and what was wrong."""


def read_json(path: Path) -> Any:
    """The JSON value held in ``path``, its texts repaired (said in one logged line); FileNotFoundError if missing.

    Anything else that keeps it from being read raises :class:`UnreadableFileError`.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except UnicodeDecodeError:
        raise UnreadableFileError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise UnreadableFileError(f"{path} could not be read ({exc.strerror or exc})") from None
    repaired: list[int] = [0]
    data = parse_json(text, str(path), repaired)
    if repaired[0]:
        log.warning("%s: %d text(s) held a lone surrogate, replaced by U+FFFD", path, repaired[0])
    return data


def parse_json(text: str, name: str, repaired: list[int] | None = None) -> Any:
    """``text`` parsed as JSON, its texts repaired (counted in ``repaired[0]``); UnreadableFileError naming ``name``."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise UnreadableFileError(f"{name} is nested too deeply to read") from None
    except ValueError as exc:
        raise UnreadableFileError(f"{name} is not JSON ({exc})") from None
    return _checked(data, name, repaired if repaired is not None else [0])


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a text that is valid Unicode comes back as it is)."""
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub("\ufffd", text)


def _checked(data: Any, name: str, repaired: list[int]) -> Any:
    """``data`` with its texts (keys included) cleaned; UnreadableFileError past ``MAX_DEPTH`` levels. Iterative."""
    root = [data]
    stack: list[tuple[list[Any] | dict[Any, Any], int]] = [(root, 0)]

    def clean(text: str) -> str:
        cleaned = clean_text(text)
        repaired[0] += cleaned is not text
        return cleaned

    while stack:
        container, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnreadableFileError(f"{name} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(container, list):
            for i, value in enumerate(container):
                if isinstance(value, str):
                    container[i] = clean(value)
                elif isinstance(value, (list, dict)):
                    stack.append((value, depth + 1))
        else:
            for key in [k for k in container if clean_text(k) is not k]:
                container[clean(key)] = container.pop(key)
            for key, value in container.items():
                if isinstance(value, str):
                    container[key] = clean(value)
                elif isinstance(value, (list, dict)):
                    stack.append((value, depth + 1))
    return root[0]
