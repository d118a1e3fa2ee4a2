"""Python's cyclic garbage collector held off while a burst of short-lived objects is made.

Parsing a GGUF header makes hundreds of thousands of small objects (a part per token of the vocabulary),
none of them cyclic garbage, and the full collections they trigger stop every thread, the window's too,
for tenths of a second each (5 full passes, 0.75 s, per read of the demo target's vocabulary). Nested and
concurrent pauses are counted: the collector runs again when the last one ends, if it ran before the first.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pausers = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block (reference counting still frees what it can)."""
    global _pausers, _was_enabled
    with _lock:
        if _pausers == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _was_enabled:
                gc.enable()
