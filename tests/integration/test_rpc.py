"""The target on remote devices: real ``specchat serve-rpc`` servers on 127.0.0.1, the draft in this process.

A lost or stopped server must end the reply with one line and leave this
process, the conversation and its committed tokens as they were.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine.depth import DepthControl
from specchat.core.llama import threads
from specchat.core.remote import RemoteError
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, Event, Finished, FinishReason, GenerationParams, Verified
from support.rpc_servers import RpcServer, free_port

PROMPT = "List the planets of the solar system, one per line, with one fact about each."


def specchat(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specchat", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )


def assert_one_line(out: subprocess.CompletedProcess[str], expected: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("specchat: error: ") and expected in lines[0], lines[0]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RpcServer, RpcServer]]:
    folder = tmp_path_factory.mktemp("rpc")
    pair = RpcServer(folder), RpcServer(folder)
    yield pair
    for server in pair:
        server.kill()


def reply(
    session: Conversation, text: str, drafter: DrafterKind, *, max_tokens: int = 48, depth: int | None = None
) -> tuple[Finished, list[int]]:
    events = list(
        session.reply(text, GenerationParams(max_tokens=max_tokens), drafter=drafter, depth=DepthControl(depth))
    )
    finished = events[-1]
    assert isinstance(finished, Finished)
    return finished, [t for e in events if isinstance(e, Verified) for t in e.committed]


def test_info_lists_each_servers_devices(servers: tuple[RpcServer, RpcServer]) -> None:
    out = specchat("info", "--json", "--rpc", ",".join(s.endpoint for s in servers))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["rpc"] is True
    assert [r["server"] for r in data["remote"]] == [s.endpoint for s in servers]
    for report in data["remote"]:
        assert report["error"] == ""
        assert len(report["devices"]) == 1 and report["devices"][0]["total_bytes"] > 1 << 28
    text = specchat("info", "--rpc", servers[0].endpoint)
    assert text.returncode == 0 and "RPC (remote devices): yes" in text.stdout
    assert f"remote: RPC0 at {servers[0].endpoint}: " in text.stdout


def test_the_targets_weights_land_on_the_servers_and_the_draft_stays_here(
    servers: tuple[RpcServer, RpcServer], demo_pair
) -> None:
    endpoints = tuple(s.endpoint for s in servers)
    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=512, rpc_servers=endpoints)
    try:
        remote = runtime.remote
        assert remote is not None and remote.connected
        assert remote.pid != os.getpid()
        weights = {name: mib for name, what, mib in remote.buffers if what == "model"}
        for server in servers:  # each server's device holds a share of the layers (named RPC<n>[endpoint])
            assert weights.get(f"RPC0[{server.endpoint}]", 0) > 100, weights
        assert remote.remote_mib() > 400  # of the demo target's 513 MiB; the token embedding stays local
        assert sum(mib for name, mib in weights.items() if not name.startswith("RPC")) < 150
        target_place, draft_place = runtime.placement()
        assert target_place.startswith("remote 5") and draft_place == "CPU"
        assert runtime.draft is not None and runtime.draft_context is not None  # loaded in this process
    finally:
        runtime.close()  # a server serves one client at a time: free them for the next test


def test_a_remote_decode_on_a_count_the_child_s_tuner_tries_is_flagged(
    servers: tuple[RpcServer, RpcServer], demo_pair
) -> None:
    """The child's thread tuner tries another count after a few decodes: the parent's view says which decodes ran
    on it, so that the round costs leave them out as they do a local target's."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: the tuner has no other thread count to try")
    endpoints = tuple(s.endpoint for s in servers)
    runtime = Runtime.load(demo_pair.target, n_ctx=256, rpc_servers=endpoints)
    try:
        remote = runtime.remote
        assert remote is not None
        remote.extend_to([1, 2, 3, 4])
        flags = []
        for token in range(5, 5 + 2 * threads.FIRST_TRY + threads.TRY_DECODES):
            remote.decode([token])
            flags.append(remote.tried)
        assert any(flags) and not all(flags), flags  # a try after FIRST_TRY decodes, and the count in use
        assert not any(flags[: threads.FIRST_TRY - 1]), flags
    finally:
        runtime.close()


def test_greedy_output_is_identical_plain_and_speculative(servers: tuple[RpcServer, RpcServer], demo_pair) -> None:
    common = [
        "chat",
        "--json",
        "--target",
        str(demo_pair.target),
        "--max-tokens",
        "48",
        "--rpc",
        ",".join(s.endpoint for s in servers),
        PROMPT,
    ]
    runs = []
    for extra in (["--no-spec"], ["--draft", str(demo_pair.draft), "--depth", "4"]):
        out = specchat(*common[:-1], *extra, common[-1])
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    plain, spec = runs
    assert plain["placement"]["target"].startswith("remote 5") and spec["placement"]["draft"] == "CPU"
    assert len(plain["tokens"]) >= 20
    assert spec["tokens"] == plain["tokens"]
    assert spec["stats"]["accepted"] > 0


def test_a_server_killed_mid_reply_ends_it_with_one_line_and_the_next_reply_reconnects(
    tmp_path: Path, demo_pair
) -> None:
    a, b = RpcServer(tmp_path), RpcServer(tmp_path)
    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=512, rpc_servers=(a.endpoint, b.endpoint))
    try:
        session = Conversation(runtime)
        events = session.reply(
            PROMPT, GenerationParams(max_tokens=200), drafter=DrafterKind.NGRAM, depth=DepthControl(2)
        )
        first = next(e for e in events if isinstance(e, Verified))
        b.kill()
        rest: list[Event] = list(events)
        finished = rest[-1]
        assert isinstance(finished, Finished) and finished.reason is FinishReason.ERROR
        assert finished.message == f"the remote server at {b.endpoint} went away"
        assert runtime.remote is not None and not runtime.remote.connected
        committed = first.committed + tuple(t for e in rest if isinstance(e, Verified) for t in e.committed)
        assert session.last_tokens == list(committed) and committed
        assert finished.stats.generated == len(committed) and finished.stats.rounds > 0  # the figures so far
        assert [m["role"] for m in session.messages] == ["user", "assistant"]
        assert session.messages[-1]["content"].startswith(first.text)

        again, _ = reply(session, "Go on.", DrafterKind.NGRAM, max_tokens=8)  # the server is still gone: one line
        assert again.reason is FinishReason.ERROR
        assert again.message.startswith(f"cannot reach the remote server at {b.endpoint}")
        assert len(session.messages) == 4 and session.messages[1]["content"].startswith(first.text)

        b = RpcServer(tmp_path, port=b.port)  # back: the next reply reconnects and runs
        back, tokens = reply(session, "Thanks.", DrafterKind.NGRAM, max_tokens=8)
        assert back.reason in (FinishReason.EOS, FinishReason.MAX_TOKENS), back.message
        assert tokens and runtime.remote.connected
    finally:
        runtime.close()
        a.kill()
        b.kill()


def test_chat_exits_2_with_one_line_when_a_server_is_lost_mid_reply(tmp_path: Path, demo_pair) -> None:
    """A lost server is an expected failure: the terminal says which and exits 2, like every other one."""
    a, b = RpcServer(tmp_path), RpcServer(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specchat",
            "chat",
            "--target",
            str(demo_pair.target),
            "--no-spec",
            "--max-tokens",
            "300",
            "--rpc",
            f"{a.endpoint},{b.endpoint}",
            PROMPT,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )
    try:
        assert proc.stdout is not None and proc.stdout.read(1), "the reply never started"
        b.kill()
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 2, (proc.returncode, stderr)
        assert f"specchat: error: the remote server at {b.endpoint} went away" in stderr.splitlines()
        assert "Traceback" not in stderr
    finally:
        proc.kill()
        a.kill()
        b.kill()


def test_a_stopped_server_fires_the_watchdog(tmp_path: Path, demo_pair) -> None:
    a, b = RpcServer(tmp_path), RpcServer(tmp_path)
    runtime = Runtime.load(
        demo_pair.target, demo_pair.draft, n_ctx=512, rpc_servers=(a.endpoint, b.endpoint), rpc_deadline=2.0
    )
    try:
        session = Conversation(runtime)
        events = session.reply(
            PROMPT, GenerationParams(max_tokens=200), drafter=DrafterKind.NGRAM, depth=DepthControl(2)
        )
        next(e for e in events if isinstance(e, Verified))
        a.pause()
        started = time.monotonic()
        finished = list(events)[-1]
        assert isinstance(finished, Finished) and finished.reason is FinishReason.ERROR
        assert finished.message.startswith(f"the remote server at {a.endpoint} stopped answering"), finished.message
        assert time.monotonic() - started < 20
        assert [m["role"] for m in session.messages] == ["user", "assistant"] and session.messages[1]["content"]
    finally:
        runtime.close()
        a.kill()
        b.kill()


def test_stop_ends_a_reply_waiting_on_a_stopped_server(tmp_path: Path, demo_pair) -> None:
    server = RpcServer(tmp_path)
    runtime = Runtime.load(demo_pair.target, demo_pair.draft, n_ctx=512, rpc_servers=(server.endpoint,))
    try:
        cancel = CancelToken()
        events = Conversation(runtime).reply(
            PROMPT, GenerationParams(max_tokens=200), drafter=DrafterKind.NONE, cancel=cancel
        )
        next(e for e in events if isinstance(e, Verified))
        server.pause()
        started = time.monotonic()
        cancel.cancel()  # the default deadline is a minute: Stop must not wait for it
        finished = list(events)[-1]
        assert isinstance(finished, Finished) and finished.reason in (FinishReason.ERROR, FinishReason.CANCELLED)
        assert time.monotonic() - started < 10
        runtime.close()  # quitting with the server still stopped: the child is killed, nothing hangs
        assert runtime.remote is not None and not runtime.remote.connected
    finally:
        runtime.close()
        server.kill()


def test_cancelling_a_load_ends_the_wait_on_a_stopped_server(tmp_path: Path, demo_pair) -> None:
    server = RpcServer(tmp_path)
    server.pause()
    started = time.monotonic()
    try:
        with pytest.raises(RemoteError, match=f"stopped waiting for the remote server at {server.endpoint}"):
            Runtime.load(
                demo_pair.target,
                demo_pair.draft,
                rpc_servers=(server.endpoint,),
                progress=lambda stage, fraction: time.monotonic() - started < 1.0,
            )
        assert time.monotonic() - started < 15  # not the default minute
    finally:
        server.kill()


def test_the_packaged_apps_entry_point_starts_the_target_worker() -> None:
    """A frozen app has no ``python -m``: its executable becomes the worker on a flag of its own."""
    from specchat.core.llama.rpc.pipe import read_message, write_message

    with subprocess.Popen(
        [sys.executable, "-m", "specchat", "--specchat-target-worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        write_message(proc.stdin, ("ping", None))  # type: ignore[arg-type]
        reply = read_message(proc.stdout)  # type: ignore[arg-type]
        assert reply is not None and reply[:3] == ("ok", proc.pid, 0)
        write_message(proc.stdin, ("close",))  # type: ignore[arg-type]
        assert proc.wait(timeout=30) == 0


def test_bad_rpc_syntax_is_one_line(demo_pair) -> None:
    out = specchat("chat", "--target", str(demo_pair.target), "--rpc", "localhost", "hi")
    assert_one_line(out, "is not HOST:PORT")
    assert_one_line(specchat("info", "--rpc", "127.0.0.1:99999"), "port must be a number from 1 to 65535")


def test_an_unreachable_server_is_one_line(demo_pair) -> None:
    port = free_port()
    out = specchat(
        "chat", "--target", str(demo_pair.target), "--draft", str(demo_pair.draft), "--rpc", f"127.0.0.1:{port}", "hi"
    )
    assert_one_line(out, f"cannot reach the remote server at 127.0.0.1:{port}")
    assert_one_line(specchat("info", "--rpc", f"127.0.0.1:{port}"), f"127.0.0.1:{port}")


def test_a_port_that_speaks_something_else_does_not_abort_the_app(demo_pair) -> None:
    """A listener that is no RPC server makes ggml abort the handshake: in the child, not here."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        endpoint = f"127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(Exception, match=f"{endpoint}"):
            Runtime.load(demo_pair.target, None, rpc_servers=(endpoint,), rpc_deadline=3.0)


def test_serve_rpc_refuses_a_busy_port_and_stops_on_ctrl_c(
    servers: tuple[RpcServer, RpcServer], tmp_path: Path
) -> None:
    assert_one_line(specchat("serve-rpc", "--port", str(servers[0].port)), "cannot listen at 127.0.0.1:")
    server = RpcServer(tmp_path)
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(timeout=10) == 0
    assert "serve-rpc stopped" in server.log.read_text()


def test_serve_rpc_off_loopback_warns_that_there_is_no_authentication(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "open.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specchat", "serve-rpc", "--host", "0.0.0.0", "--port", str(port), "--threads", "1"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        end = time.monotonic() + 60
        while "serving at" not in log.read_text() and time.monotonic() < end:
            time.sleep(0.1)
        text = log.read_text()
        assert "no authentication" in text and "trusted network only" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP])
def test_a_killed_or_stopped_target_process_is_not_blamed_on_the_server(
    tmp_path: Path, demo_pair, how: signal.Signals
) -> None:
    server = RpcServer(tmp_path)
    runtime = Runtime.load(demo_pair.target, None, n_ctx=512, rpc_servers=(server.endpoint,), rpc_deadline=2.0)
    try:
        events = Conversation(runtime).reply(PROMPT, GenerationParams(max_tokens=200), drafter=DrafterKind.NGRAM)
        next(e for e in events if isinstance(e, Verified))
        assert runtime.remote is not None and runtime.remote.pid is not None
        pid = runtime.remote.pid
        os.kill(pid, how)
        finished = list(events)[-1]
        assert isinstance(finished, Finished) and finished.reason is FinishReason.ERROR
        did = "died (killed by SIGKILL)" if how == signal.SIGKILL else "stopped answering (no reply within 2 s)"
        assert finished.message == (
            f"the target's process (pid {pid}) {did}; the remote server at {server.endpoint} still answers"
        )
    finally:
        runtime.close()
        server.kill()


def test_each_bad_peer_gets_its_own_line(servers: tuple[RpcServer, RpcServer], demo_pair) -> None:
    """A listener that talks nonsense and one that never answers, beside a good server: each named for what it did."""
    import threading

    with socket.socket() as garbage, socket.socket() as silent:
        for listener in (garbage, silent):
            listener.bind(("127.0.0.1", 0))
            listener.listen()

        def talk_nonsense() -> None:
            while True:
                try:
                    conn, _ = garbage.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 8)

        threading.Thread(target=talk_nonsense, daemon=True).start()
        bad, quiet = (f"127.0.0.1:{s.getsockname()[1]}" for s in (garbage, silent))
        out = specchat(
            "chat",
            "--target",
            str(demo_pair.target),
            "--no-spec",
            "--rpc-timeout",
            "3",
            "--rpc",
            f"{servers[0].endpoint},{bad},{quiet}",
            "hi",
        )
    assert_one_line(out, f"the remote server at {bad} is not a llama.cpp RPC server")
    assert f"the remote server at {quiet} did not answer within 3 s" in out.stderr
    assert servers[0].endpoint not in out.stderr


def test_serve_rpc_checks_the_host_threads_and_devices_before_serving(tmp_path: Path) -> None:
    """ggml's server takes only an IPv4 address: a host name is resolved here, before "serving" is said."""
    assert_one_line(specchat("serve-rpc", "--threads", "1000"), "threads must be between 1 and")
    assert_one_line(specchat("serve-rpc", "--port", str(free_port()), "--device", "bogus"), "no device named bogus")
    port = free_port()
    with subprocess.Popen(
        [sys.executable, "-m", "specchat", "serve-rpc", "--host", "localhost", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    ) as proc:
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            assert line == f"specchat: serving at localhost:{port} (127.0.0.1); Ctrl-C stops\n", line
            with socket.create_connection(("127.0.0.1", port), timeout=10):
                pass
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()
