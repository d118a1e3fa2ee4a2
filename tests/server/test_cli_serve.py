"""``specchat serve`` as a user starts it: the address it prints, Ctrl-C, a warning off loopback, bad flags."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx
import pytest


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "specchat", "serve", *args], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env={**os.environ})
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "specchat serve: " in line:
            return proc, "".join(lines)
    stop(proc)
    raise AssertionError("".join(lines))


def stop(proc: subprocess.Popen[str]) -> int:
    """Ctrl-C, then the exit status."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=60)
    finally:
        assert proc.stderr is not None
        proc.stderr.close()


def test_serve_prints_its_address_serves_and_stops_on_ctrl_c(demo_pair) -> None:
    proc, said = start("--target", str(demo_pair.target), "--draft", str(demo_pair.draft), "--port", "0",
                       "--ctx", "1024", "--api-key", "k")
    try:
        url = re.search(r"(http://127\.0\.0\.1:\d+)/v1", said)
        assert url is not None and "drafter composite" in said and "API key required" in said, said
        models = httpx.get(url.group(1) + "/v1/models", headers={"Authorization": "Bearer k"}).json()
        assert models["data"][0]["specchat"]["context"] == 1024
        assert "warning" not in said
    finally:
        assert stop(proc) == 0


def test_serve_warns_when_bound_beyond_this_machine(demo_pair) -> None:
    proc, said = start("--target", str(demo_pair.target), "--host", "0.0.0.0", "--port", "0", "--ctx", "512")
    try:
        assert "specchat: warning: listening on 0.0.0.0" in said and "no --api-key" in said
        port = re.search(r":(\d+)/v1", said)
        assert port is not None
        assert httpx.get(f"http://127.0.0.1:{port.group(1)}/health").json()["status"] == "ok"
    finally:
        assert stop(proc) == 0


@pytest.mark.parametrize(("args", "expected"), [
    ([], "give --target MODEL.gguf"),
    (["--demo", "--target", "x.gguf"], "not both"),
    (["--target", "x.gguf", "--port", "70000"], "--port must be 0-65535"),
    (["--target", "x.gguf", "--queue", "0"], "--queue must be 1-1024"),
    (["--target", "x.gguf", "--prompt-cache-mib", "-1"], "--prompt-cache-mib must be 0-"),
    (["--target", "x.gguf", "--drafter", "oracle"], "invalid choice"),
    (["--target", "missing.gguf", "--port", "0"], "model file not found"),
])
def test_bad_flags_give_one_line_and_exit_2(args: list[str], expected: str) -> None:
    out = subprocess.run([sys.executable, "-m", "specchat", "serve", *args], capture_output=True, text=True,
                         env={**os.environ}, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: ") and expected in lines[0], out.stderr
