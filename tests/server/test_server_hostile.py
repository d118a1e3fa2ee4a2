"""The server against a hostile client, over real sockets on 127.0.0.1: numbers no float holds, nulls,
abandoned queue places, foreign Host headers and framing a strict server refuses."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from specchat.server.app import MAX_HEADER_FIELDS, ServerConfig, host_of, is_loopback

QUESTION = [{"role": "user", "content": "What is a bicycle?"}]
CHAT = "/v1/chat/completions"


def wait_until(check, what: str, seconds: float = 120.0) -> None:
    """Poll ``check`` until it holds (a liveness wait, not a speed claim)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def address(served) -> tuple[str, int]:
    parts = urlsplit(served.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def error(self) -> dict[str, object]:
        error: dict[str, object] = json.loads(self.body)["error"]
        return error


def read_answer(sock: socket.socket, method: str = "GET") -> Answer:
    response = http.client.HTTPResponse(sock, method=method)
    response.begin()
    return Answer(response.status, response.headers, response.read())


def exchange(served, head: bytes, method: str = "GET") -> tuple[Answer, socket.socket]:
    """Send ``head`` (a request as raw bytes) on a new connection; the answer and the still open socket."""
    sock = socket.create_connection(address(served), timeout=120)
    sock.sendall(head)
    return read_answer(sock, method), sock


def closed_by_server(sock: socket.socket) -> bool:
    with sock:
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def chat_body(**fields: object) -> str:
    return json.dumps({"model": "m", "messages": QUESTION, "max_tokens": 1, **fields})


# ---- numbers no float holds, and a 500 that keeps the connection


@pytest.mark.parametrize(
    "name",
    [
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repeat_penalty",
        "seed",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "top_logprobs",
    ],
)
def test_a_huge_number_is_a_400_and_the_kept_alive_connection_serves_the_next_request(served, name: str) -> None:
    http_conn = http.client.HTTPConnection(*address(served), timeout=120)
    try:
        body = chat_body()[:-1] + f', "{name}": 1{"0" * 400}}}'  # 10**400 written out: valid JSON
        http_conn.request("POST", CHAT, body=body, headers={"content-type": "application/json"})
        first = http_conn.getresponse()
        error = json.loads(first.read())["error"]
        assert first.status == 400 and error["param"] == name and error["type"] == "invalid_request_error", error
        assert first.getheader("connection") is None
        local = http_conn.sock.getsockname()
        http_conn.request("POST", CHAT, body=chat_body(), headers={"content-type": "application/json"})
        second = http_conn.getresponse()
        assert second.status == 200 and json.loads(second.read())["choices"]
        assert http_conn.sock.getsockname() == local  # the same connection, not a new one
    finally:
        http_conn.close()


def test_an_unexpected_failure_is_one_logged_500_and_the_connection_stays_usable(
    serve, caplog: pytest.LogCaptureFixture
) -> None:
    with serve() as s:
        s.host.info = None  # /v1/models now fails inside the endpoint
        http_conn = http.client.HTTPConnection(*address(s), timeout=120)
        try:
            with caplog.at_level(logging.ERROR):
                http_conn.request("GET", "/v1/models")
                broken = http_conn.getresponse()
                assert broken.status == 500
                assert json.loads(broken.read())["error"]["message"] == "internal error: AttributeError"
            local = http_conn.sock.getsockname()
            http_conn.request("GET", "/health")
            health = http_conn.getresponse()
            assert health.status == 200 and json.loads(health.read())["status"] == "ok"
            assert http_conn.sock.getsockname() == local
        finally:
            http_conn.close()
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert [r.name for r in tracebacks] == ["specchat.server"]  # once, by the server; uvicorn never saw it


# ---- null is "not given"


def test_a_null_max_completion_tokens_leaves_max_tokens_in_force(served) -> None:
    body = {
        "model": None,
        "messages": QUESTION,
        "max_completion_tokens": None,
        "max_tokens": 3,
        "stream": True,
        "temperature": None,
        "stream_options": {"include_usage": True},
        "speculative": {"depth": 0, "drafter": None},
    }
    chunks = []
    with httpx.stream("POST", served.url + CHAT, json=body, timeout=120) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    texts = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert chunks[-1]["usage"]["completion_tokens"] <= 3
    assert 1 <= len(texts) <= 3 and finals in (["length"], ["stop"])
    assert len(chunks) <= 3 + 3  # the role, at most three tokens (one a round at depth 0), the end, the usage


# ---- a client that leaves the queue


def test_abandoned_queued_requests_give_up_their_places_at_once(serve) -> None:
    with serve(queue_size=2) as s:
        long = {"model": "m", "messages": QUESTION, "max_tokens": 1500, "stream": True, "speculative": {"depth": 0}}
        short = json.dumps({"model": "m", "messages": QUESTION, "max_tokens": 2}).encode()
        head = (
            f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(short)}\r\n\r\n"
        ).encode() + short
        results: list[int] = []
        with httpx.Client(timeout=120) as running, running.stream("POST", s.url + CHAT, json=long) as first:
            lines = first.iter_lines()
            next(lines)  # running: the engine is busy with this one
            leaving = [socket.create_connection(address(s), timeout=120) for _ in range(2)]
            for sock in leaving:
                sock.sendall(head)
            wait_until(lambda: s.host.waiting == 2, "both requests to wait")
            for sock in leaving:
                sock.close()
            wait_until(lambda: s.host.waiting == 0, "the abandoned requests to leave the queue")
            assert s.host.busy  # the long reply still runs: nobody had to finish for the places to free

            def ask() -> None:
                with httpx.Client(timeout=120) as http:
                    results.append(
                        http.post(s.url + CHAT, content=short, headers={"content-type": "application/json"}).status_code
                    )

            live = [threading.Thread(target=ask) for _ in range(2)]
            for thread in live:
                thread.start()
            wait_until(lambda: s.host.waiting == 2, "the two live requests to wait")
            full = httpx.post(s.url + CHAT, content=short, headers={"content-type": "application/json"}, timeout=120)
            assert full.status_code == 429  # the two places are really taken now
        for thread in live:
            thread.join(timeout=300)
        assert results == [200, 200]


# ---- Host headers


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8080", "localhost"),
        ("localhost.", "localhost"),
        ("localhost.:80", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:65535", "127.0.0.1"),
        ("[::1]", "::1"),
        ("[::1]:8080", "::1"),
        ("[0:0:0:0:0:0:0:1]:1", "::1"),
        ("evil.example:80", "evil.example"),
        ("[::1].evil.example", None),
        ("[::1]evil.example:80", None),
        ("[::1", None),
        ("localhost:80:80", None),
        ("user@localhost", None),
        ("localhost/x", None),
        ("[evil.example]", None),
        ("localhost:8o", None),
        ("", None),
    ],
)
def test_host_headers_are_read_as_a_host_and_a_port(header: str, host: str | None) -> None:
    assert host_of(header) == host


def test_loopback_names_and_addresses() -> None:
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.5.6.7", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("localhost.evil.example", "10.0.0.1", "::", "evil.example", "0.0.0.0"))


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("[::1].evil.example", 403),
        ("[::1]evil.example:80", 403),
        ("localhost.evil.example", 403),
        ("127.0.0.1.nip.io", 403),
        ("evil.example", 403),
        ("localhost.", 200),
        ("localhost.:1234", 200),
        ("localhost", 200),
        ("127.0.0.1:1", 200),
        ("[::1]", 200),
        ("[::1]:8080", 200),
    ],
)
def test_only_loopback_hosts_are_served(served, header: str, status: int) -> None:
    answer, sock = exchange(served, f"GET /v1/models HTTP/1.1\r\nHost: {header}\r\n\r\n".encode())
    sock.close()
    assert answer.status == status, answer.body
    if status == 403:
        assert answer.error["code"] == "host_not_allowed" and header in str(answer.error["message"])


# ---- framing


def test_http_versions_other_than_1_0_and_1_1_get_505_and_a_close(served) -> None:
    for head in (
        b"GET /v1/models HTTP/3.0\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /health HTTP/2.0\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ):
        answer, sock = exchange(served, head)
        assert answer.status == 505 and answer.error["code"] == "http_version_not_supported", (head, answer)
        assert answer.headers["connection"] == "close" and closed_by_server(sock)
    old, sock = exchange(served, b"GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    sock.close()
    assert old.status == 200 and json.loads(old.body)["data"]


def test_too_many_or_too_large_header_fields_get_431_and_a_close(served) -> None:
    big = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 8192 + b"\r\n\r\n"
    many = (
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(f"X-H{i}: {i}\r\n".encode() for i in range(300))
        + b"\r\n"
    )
    for head, said in ((big, "bytes"), (many, "301 header fields")):
        answer, sock = exchange(served, head)
        assert answer.status == 431 and answer.error["code"] == "header_fields_too_large", answer
        assert said in str(answer.error["message"])
        assert answer.headers["connection"] == "close" and closed_by_server(sock)
    at_limit = (
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(f"X-H{i}: {i}\r\n".encode() for i in range(MAX_HEADER_FIELDS - 1))
        + b"\r\n"
    )
    answer, sock = exchange(served, at_limit)
    sock.close()
    assert answer.status == 200
    # A head still unfinished past the HTTP parser's cap (16 KiB) is not buffered further: uvicorn's 400.
    endless, sock = exchange(served, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (17 << 10))
    assert endless.status == 400 and endless.headers["connection"] == "close" and closed_by_server(sock)


def test_head_is_get_without_a_body_and_checks_the_key_too(served, serve) -> None:
    got, sock = exchange(served, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    sock.sendall(b"HEAD /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = read_answer(sock, "HEAD")
    sock.close()
    assert head.status == 200 and head.body == b""
    assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.body))
    with serve(ServerConfig(api_key="k")) as s:
        refused, sock = exchange(s, b"HEAD /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "HEAD")
        sock.close()
        assert refused.status == 401
    posted, sock = exchange(served, f"HEAD {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(), "HEAD")
    sock.close()
    assert posted.status == 405


def test_a_trailing_slash_is_a_404_naming_the_endpoint_not_a_redirect(served) -> None:
    answer, sock = exchange(served, b"GET /v1/models/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    sock.close()
    assert answer.status == 404 and "location" not in answer.headers
    assert answer.error["message"] == "no such endpoint: /v1/models/ (did you mean /v1/models?)"
    posted = httpx.post(served.url + CHAT + "/", json={"messages": QUESTION}, timeout=120)
    assert posted.status_code == 404 and "did you mean /v1/chat/completions?" in posted.json()["error"]["message"]


def test_a_request_cancelled_as_the_server_stops_is_one_log_line(served) -> None:
    """uvicorn logs a request it cancels at the end of its grace period (a client that does not read) as an
    "Exception in ASGI application" with a traceback; the server's own filter makes it one line."""
    errors = logging.getLogger("uvicorn.error")
    try:
        raise asyncio.CancelledError("Task cancelled, timeout graceful shutdown exceeded")
    except asyncio.CancelledError:
        record = errors.makeRecord(
            errors.name, logging.ERROR, __file__, 1, "Exception in ASGI application\n", (), sys.exc_info()
        )
    assert errors.filter(record)  # every filter of the logger
    assert record.getMessage() == "a request was cut off as the server stopped" and record.exc_info is None
    other = errors.makeRecord(
        errors.name,
        logging.ERROR,
        __file__,
        1,
        "Exception in ASGI application\n",
        (),
        (ValueError, ValueError("x"), None),
    )
    assert errors.filter(other) and other.exc_info is not None  # a real bug keeps it
