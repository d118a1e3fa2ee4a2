"""Every thread's Python stack, short, for the message of a test that waited in vain (where each thread was)."""

from __future__ import annotations

import sys
import threading
import traceback

FRAMES = 8  # the innermost frames of each thread: where it waits, and what called that


def thread_stacks(frames: int = FRAMES) -> str:
    """Each live thread's name and its innermost ``frames`` frames, one line per frame."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = traceback.extract_stack(frame)[-frames:]
        lines = [f"  {s.filename.rsplit('/', 2)[-1]}:{s.lineno} {s.name}: {(s.line or '').strip()}" for s in stack]
        parts.append(f"thread {names.get(ident, ident)}:\n" + "\n".join(lines))
    return "\n".join(parts)
