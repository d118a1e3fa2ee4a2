"""A stated background load for the benchmarks that compare idle with busy: N processes, each a pure-Python spin."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True: pass"


@contextmanager
def background_load(processes: int) -> Iterator[None]:
    """Keep ``processes`` busy processes running for the duration of the block."""
    load = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(processes)]
    try:
        yield
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
