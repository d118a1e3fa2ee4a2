"""A loopback stand-in for the Hugging Face hub, served from a thread.

Tests get it through the ``hub`` fixture (tests/conftest.py); scripts (the docs
screenshots) use :func:`serve` directly. Besides a well-behaved hub it can be
hostile (the fields after ``throttle``): lie in its headers, answer HTML or
broken JSON, redirect in a loop, trickle or cut short a body.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    status: int
    sent: int = 0  # body bytes written to the socket


@dataclass
class FakeHub:
    """What the server serves and how it misbehaves; tests mutate it freely."""

    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    lfs: set[tuple[str, str]] = field(default_factory=set)  # (repo, filename) served as LFS
    gated: set[str] = field(default_factory=set)
    downloads: dict[str, int] = field(default_factory=dict)
    cut_after: list[int] = field(default_factory=list)  # next GETs of a file drop the connection after N bytes
    corrupt: set[str] = field(default_factory=set)  # filenames whose body is served with one byte flipped
    ignore_range: bool = False
    throttle: float = 0.0  # seconds to sleep after each 8 KiB of a file body
    hold_after: int | None = None  # a GET of a file sends this many bytes, then waits for ``release``
    release: threading.Event = field(default_factory=threading.Event)
    commit_header: str | None = None  # X-Repo-Commit sent instead of COMMIT
    etag_header: str | None = None  # ETag and X-Linked-Etag sent instead of the file's hash
    size_header: int | None = None  # X-Linked-Size sent instead of the file's size
    raw_api: tuple[str, bytes] | None = None  # (content type, body) answered to every /api/ call
    redirect_loop: bool = False  # every request is answered 302 to a URL that redirects back
    trickle: float = 0.0  # a file body is sent one byte at a time, this many seconds apart
    stall_head: float = 0.0  # seconds to wait before answering a HEAD
    short_body: bool = False  # a GET sends half of what its Content-Length promises, then closes
    pointer_size: bool = True  # False: listings leave out lfs.pointerSize
    updated: dict[str, str] = field(default_factory=dict)  # repo -> lastModified sent in search hits
    api_status: int | None = None  # every /api/ call is answered with this status (a hub in trouble)
    stall_api: float = 0.0  # seconds to wait before answering an /api/ call (a hub that does not answer)
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def add(self, repo: str, filename: str, data: bytes, *, lfs: bool = True) -> None:
        self.repos.setdefault(repo, {})[filename] = data
        if lfs:
            self.lfs.add((repo, filename))

    def gets(self, filename: str) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + filename)]


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # a client that left (a cancelled download): no traceback
            self.close_connection = True

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        record = Request("HEAD" if head else "GET", path, self.headers.get("Range"), 200)
        self.hub.requests.append(record)
        try:
            if self.hub.redirect_loop:
                self._redirect(url.path, "bounce" not in query, record)
            elif path.startswith("/api/") and self.hub.stall_api and not self.hub.release.wait(self.hub.stall_api):
                self._error(504, "Timeout", "gateway timeout", record)
            elif self.hub.api_status is not None and path.startswith("/api/"):
                self._error(self.hub.api_status, "ServerError", "internal error", record)
            elif self.hub.raw_api is not None and path.startswith("/api/"):
                self._raw(*self.hub.raw_api)
            elif m := _RESOLVE.match(path):
                self._resolve(m["repo"], m["file"], head, record)
            elif m := _INFO.match(path):
                self._info(m["repo"], "blobs" in query, record)
            elif path == "/api/models":
                self._search(query.get("search", [""])[0], record)
            else:
                self._error(404, "RepoNotFound", "not found", record)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _error(self, status: int, code: str, message: str, record: Request) -> None:
        record.status = status
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _redirect(self, path: str, bounce: bool, record: Request) -> None:
        record.status = 302
        self.send_response(302)
        self.send_header("Location", path + ("?bounce=1" if bounce else ""))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _raw(self, content_type: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _check_repo(self, repo: str, record: Request) -> bool:
        if repo in self.hub.gated:
            self._error(401, "GatedRepo", "Access to this repo is restricted", record)
            return False
        if repo not in self.hub.repos:
            self._error(404, "RepoNotFound", "Repository not found", record)
            return False
        return True

    def _json(self, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _resolve(self, repo: str, filename: str, head: bool, record: Request) -> None:
        if not self._check_repo(repo, record):
            return
        data = self.hub.repos[repo].get(filename)
        if data is None:
            self._error(404, "EntryNotFound", "Entry not found", record)
            return
        lfs = (repo, filename) in self.hub.lfs
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        body = data
        if filename in self.hub.corrupt:
            body = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        rng = self.headers.get("Range")
        if rng and not self.hub.ignore_range:
            asked = re.match(r"bytes=(\d+)-", rng)
            assert asked is not None, rng  # the clients under test send only this form
            start = int(asked.group(1))
        part = body[start:]
        record.status = 206 if start else 200
        if head and self.hub.stall_head:
            time.sleep(self.hub.stall_head)
        etag = self.hub.etag_header if self.hub.etag_header is not None else etag
        self.send_response(record.status)
        self.send_header("X-Repo-Commit", self.hub.commit_header if self.hub.commit_header is not None else COMMIT)
        self.send_header("ETag", f'"{etag}"')
        if lfs:
            self.send_header("X-Linked-Etag", f'"{etag}"')
            size = self.hub.size_header if self.hub.size_header is not None else len(data)
            self.send_header("X-Linked-Size", str(size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(part)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if head:
            return
        limit = self.hub.cut_after.pop(0) if self.hub.cut_after else None
        if self.hub.short_body:
            limit = len(part) // 2 if start == 0 else 0
        if limit is not None:
            part = part[:limit]
        if self.hub.trickle:
            for i in range(len(part)):
                self.wfile.write(part[i : i + 1])
                self.wfile.flush()
                record.sent += 1
                time.sleep(self.hub.trickle)
            return
        if self.hub.hold_after is not None and len(part) > self.hub.hold_after:
            self.wfile.write(part[: self.hub.hold_after])
            self.wfile.flush()
            record.sent += self.hub.hold_after
            part = part[self.hub.hold_after :]
            self.hub.release.wait()
        view = memoryview(part)
        for i in range(0, len(view), 8192):
            self.wfile.write(view[i : i + 8192])
            record.sent += len(view[i : i + 8192])
            if self.hub.throttle:
                time.sleep(self.hub.throttle)
        if limit is not None:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    def _info(self, repo: str, blobs: bool, record: Request) -> None:
        if not self._check_repo(repo, record):
            return
        siblings = []
        for name, data in sorted(self.hub.repos[repo].items()):
            entry: dict[str, object] = {"rfilename": name}
            if blobs:
                entry["size"] = len(data)
                entry["blobId"] = git_blob_sha1(data)
                if (repo, name) in self.hub.lfs:
                    lfs: dict[str, object] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                    if self.hub.pointer_size:
                        lfs["pointerSize"] = 134
                    entry["lfs"] = lfs
            siblings.append(entry)
        self._json({"id": repo, "modelId": repo, "sha": COMMIT, "tags": ["gguf"], "siblings": siblings})

    def _search(self, text: str, record: Request) -> None:
        hits = [
            {
                "id": repo,
                "modelId": repo,
                "downloads": self.hub.downloads.get(repo, 0),
                "likes": 1,
                "tags": ["gguf"],
                **({"lastModified": self.hub.updated[repo]} if repo in self.hub.updated else {}),
            }
            for repo in sorted(self.hub.repos)
            if text.lower() in repo.lower()
        ]
        hits.sort(key=lambda h: -self.hub.downloads.get(str(h["id"]), 0))
        self._json(hits)


@contextmanager
def serve(state: FakeHub | None = None) -> Iterator[FakeHub]:
    """Serve ``state`` (a fresh FakeHub by default) on a loopback port; ``.url`` is its endpoint."""
    from huggingface_hub import close_session

    state = state if state is not None else FakeHub()
    handler = type("Handler", (_Handler,), {"hub": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fake-hub", daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.release.set()  # a held body goes on, so its handler thread ends
        close_session()  # drop pooled connections to this server before it goes
        server.shutdown()
        server.server_close()
        thread.join()
