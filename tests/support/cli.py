"""The terminal commands as a user runs them: ``python -m specchat ...`` in a child process."""

from __future__ import annotations

import os
import subprocess
import sys


def specchat(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``specchat ARGS`` (llama.cpp's threads sleeping while they wait, as the suite's other processes run)."""
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
        timeout=timeout,
    )
