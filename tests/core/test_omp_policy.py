"""llama.cpp's OpenMP threads sleep while they wait unless the user chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys


def _policy_seen_by_llama(env: dict[str, str]) -> str:
    code = ("import specchat.core.llama.backend, os; "
            "print(os.environ.get('OMP_WAIT_POLICY'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_waiting_threads_sleep_by_default() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _policy_seen_by_llama(env) == "PASSIVE"


def test_a_policy_the_user_chose_is_kept() -> None:
    assert _policy_seen_by_llama({**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"
