"""``specchat serve`` as a user starts it: the address it prints, Ctrl-C, a warning off loopback, bad flags."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "specchat", "serve", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ},
    )
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
    proc, said = start(
        "--target",
        str(demo_pair.target),
        "--draft",
        str(demo_pair.draft),
        "--port",
        "0",
        "--ctx",
        "1024",
        "--api-key",
        "k",
    )
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


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "give --target MODEL.gguf"),
        (["--demo", "--target", "x.gguf"], "not both"),
        (["--target", "x.gguf", "--port", "70000"], "--port must be 0-65535"),
        (["--target", "x.gguf", "--queue", "0"], "--queue must be 1-1024"),
        (["--target", "x.gguf", "--prompt-cache-mib", "-1"], "--prompt-cache-mib must be 0-"),
        (["--target", "x.gguf", "--drafter", "oracle"], "invalid choice"),
        (["--target", "missing.gguf", "--port", "0"], "model file not found"),
        (["--target", "x.gguf", "--api-key", "clé-secrète"], "--api-key: the API key may hold only printable ASCII"),
        (["--target", "x.gguf", "--api-key", "two words"], "--api-key: the API key may hold only printable ASCII"),
        (["--target", "x.gguf", "--api-key", ""], "--api-key: the API key is empty"),
    ],
)
def test_bad_flags_give_one_line_and_exit_2(args: list[str], expected: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "specchat", "serve", *args],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: ") and expected in lines[0], out.stderr


def test_a_key_from_the_environment_no_client_can_send_is_named_as_such() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "specchat", "serve", "--target", "x.gguf"],
        capture_output=True,
        text=True,
        env={**os.environ, "SPECCHAT_API_KEY": "ключ"},
        timeout=300,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        "specchat: error: $SPECCHAT_API_KEY: the API key may hold only printable ASCII characters, no spaces"
    )


CHAT_BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "Tell me a long story about a bicycle."}],
    "max_tokens": 900,
    "stream": True,
    "speculative": {"depth": 0},
}


def stream_to_its_end(
    url: str, results: dict[int, tuple[int, list[str]]], index: int, reading: threading.Event
) -> None:
    """One streamed request: its status and its events (or its error body), kept in ``results``."""
    with httpx.Client(timeout=120) as http, http.stream("POST", url + "/v1/chat/completions", json=CHAT_BODY) as answer:
        if answer.status_code != 200:
            results[index] = (answer.status_code, [answer.read().decode()])
            return
        events = []
        for line in answer.iter_lines():  # a connection closed before the end raises here: the test fails
            if line.startswith("data: "):
                events.append(line[6:])
                if '"content": "' in line and '"content": ""' not in line:  # a token, not the role
                    reading.set()
        results[index] = (200, events)


@pytest.mark.parametrize("signals", [("SIGINT",), ("SIGTERM",), ("SIGINT", "SIGINT")])
def test_a_signal_ends_eight_streams_cleanly_and_exits_0(demo_pair, signals: tuple[str, ...]) -> None:
    proc, said = start(
        "--target",
        str(demo_pair.target),
        "--draft",
        str(demo_pair.draft),
        "--port",
        "0",
        "--ctx",
        "1024",
        "--queue",
        "8",
    )
    url = re.search(r"(http://127\.0\.0\.1:\d+)/v1", said)
    assert url is not None, said
    results: dict[int, tuple[int, list[str]]] = {}
    reading = threading.Event()
    clients = [threading.Thread(target=stream_to_its_end, args=(url.group(1), results, i, reading)) for i in range(8)]
    try:
        for client in clients:
            client.start()
        assert reading.wait(timeout=120), "no stream began"
        deadline = time.monotonic() + 120
        while httpx.get(url.group(1) + "/health").json()["waiting"] < 7:  # one streams, seven wait their turn
            assert time.monotonic() < deadline, "the other seven never queued"
            time.sleep(0.05)
        for name in signals:  # a second Ctrl-C right after the first: uvicorn's "force quit"
            proc.send_signal(getattr(signal, name))
        for client in clients:
            client.join(timeout=120)
        proc.send_signal(signal.SIGINT)  # once more while it winds down (or a no-op once it has exited)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, rest
    assert "Traceback" not in rest and rest.strip().splitlines() == ["specchat serve: stopped"], rest
    assert sorted(results) == list(range(8))
    streamed = [events for status, events in results.values() if status == 200]
    refused = [json.loads(events[0])["error"] for status, events in results.values() if status == 503]
    assert len(streamed) == 1 and len(refused) == 7, results
    events = streamed[0]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == "server_shutting_down", events
    assert any(
        json.loads(e).get("choices") and json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-2]
    )
    assert all(error["code"] == "server_shutting_down" and error["type"] == "server_error" for error in refused)
