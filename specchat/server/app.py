"""The Starlette application: routes, authentication, limits, streaming, and errors in the OpenAI shape.

Safe by default: a Bearer key when one is set (compared in constant time);
bodies over the limit refused before they are read in full (413); JSON bodies
only (415 otherwise, so a web page cannot post here without a CORS preflight,
which is never granted); on a loopback address, only loopback ``Host`` names
(no DNS rebinding, the ``Host`` read as a host and port, not by prefix). Only
HTTP/1.0 and 1.1 (505 otherwise), at most 100 header fields and 8 KiB of them
(431). Every failure is an OpenAI-shaped error with its status; an unexpected
one is a 500, the connection stays usable and the server goes on. A stopping
server ends every open request itself: a stream with an error event and
``[DONE]``, a request still waiting or running with a 503 (see ``Api.stop``).
No request names a file: the pair is chosen on the command line.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specchat.core.types import Finished, FinishReason, GenerationStats, Verified
from specchat.server import protocol
from specchat.server.errors import ApiError
from specchat.server.replies import Reply, fates_of
from specchat.server.request_queue import SHUTTING_DOWN, Job, RequestQueue, Started, shutting_down

log = logging.getLogger("specchat.server")

DEFAULT_MAX_BODY = 4 << 20  # 4 MiB: a long conversation is far less; a context's worth of text is under 1 MiB
DEFAULT_TIME_LIMIT = 300.0
MAX_HEADER_FIELDS = 100  # Apache's LimitRequestFields; a client of this API sends about ten
MAX_HEADER_BYTES = 8 << 10  # names and values together; the longest field a client needs is the API key (256)
HTTP_VERSIONS = frozenset({"1.0", "1.1"})
# A Host header: a name or IPv4 address, or an IPv6 address in brackets; then an optional port.
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^\[\]:/?#@\s]+))(?::[0-9]*)?")
_STOPPING = object()  # put in every open request's events when the server stops


@dataclass(frozen=True)
class ServerConfig:
    """What the command line sets: the key, the limits, and the defaults a request does not override."""

    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    time_limit: float = DEFAULT_TIME_LIMIT  # seconds of decoding per request
    defaults: protocol.Defaults = field(default_factory=protocol.Defaults)
    loopback_only_hosts: bool = True  # refuse Host names other than loopback ones (set off when bound elsewhere)


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def _sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


class EventStream(StreamingResponse):
    """Server-sent events; not listening for the disconnect itself: the request's own watcher does."""

    def __init__(self, events: AsyncIterator[bytes]) -> None:
        super().__init__(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)


class Api:
    """The endpoints over one :class:`RequestQueue`."""

    def __init__(self, host: RequestQueue, config: ServerConfig) -> None:
        self.host = host
        self.config = config
        self.stopping = False
        self._open: set[asyncio.Queue[object]] = set()  # the events of every request not yet answered in full
        self._idle = asyncio.Event()
        self._idle.set()

    # ---- checks common to every request

    def _check_access(self, request: Request) -> None:
        if self.config.loopback_only_hosts:
            header = request.headers.get("host", "")
            name = host_of(header)
            if header and (name is None or not is_loopback(name)):
                raise ApiError(
                    403,
                    f"this server answers only to localhost, not to Host {_short(header)!r}",
                    kind="permission_error",
                    code="host_not_allowed",
                )
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(
                401,
                "invalid or missing API key: send Authorization: Bearer <key>",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    async def _body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(
                413,
                f"the request body is {int(declared):,} bytes; this server takes at most {limit:,}",
                code="body_too_large",
            )
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise ApiError(
                415, "send the request body as JSON with Content-Type: application/json", code="unsupported_media_type"
            )
        chunks = bytearray()
        try:
            async for chunk in request.stream():
                chunks += chunk
                if len(chunks) > limit:
                    raise ApiError(
                        413, f"the request body is over {limit:,} bytes, this server's limit", code="body_too_large"
                    )
        except ClientDisconnect:
            raise ApiError(400, "the client closed the connection before sending the whole body") from None
        return bytes(chunks)

    # ---- stopping

    async def stop(self, timeout: float) -> None:
        """End every open request now, whatever the engine does: a stream gets an error event and ``[DONE]``,
        a request waiting in the queue or running without a stream a 503; new requests get a 503 too. Then
        wait (at most ``timeout`` seconds: a client that does not read) until their last bytes are handed
        to the connections. Runs on the event loop, before uvicorn closes the connections."""
        self.stopping = True
        self.host.stop_taking()
        for events in self._open:
            events.put_nowait(_STOPPING)
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("%d request(s) still open as the server stops", len(self._open))

    def _opened(self, events: asyncio.Queue[object]) -> None:
        self._open.add(events)
        self._idle.clear()

    def _closed(self, events: asyncio.Queue[object]) -> None:
        self._open.discard(events)
        if not self._open:
            self._idle.set()

    # ---- endpoints

    async def models(self, request: Request) -> Response:
        self._check_access(request)
        info = self.host.info
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": info.model_id,
                        "object": "model",
                        "created": 0,
                        "owned_by": "specchat",
                        "specchat": {
                            "target": info.target,
                            "draft": info.draft,
                            "mtp": info.has_mtp,
                            "context": info.n_ctx,
                            "default_drafter": info.default_drafter,
                            "placement": {"target": info.placement[0], "draft": info.placement[1]},
                        },
                    }
                ],
            }
        )

    async def health(self, request: Request) -> Response:
        return JSONResponse(
            {"status": "stopping" if self.stopping else "ok", "busy": self.host.busy, "waiting": self.host.waiting}
        )

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, protocol.parse_chat)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, protocol.parse_completion)

    async def _generate(
        self, request: Request, parse: Callable[[dict[str, Any], protocol.Defaults], protocol.Request]
    ) -> Response:
        self._check_access(request)
        if self.stopping:
            raise shutting_down()
        parsed = parse(protocol.parse_json(await self._body(request)), self.config.defaults)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[object] = asyncio.Queue()
        client = f"{request.client.host}:{request.client.port}" if request.client else ""

        def emit(event: object) -> None:  # called on the engine's thread
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the event loop is closed: the server is shutting down, nobody listens
                job.cancel.cancel()

        job = Job(parsed, emit=emit, time_limit=self.config.time_limit, client=client)
        self.host.submit(job)
        self._opened(events)
        watcher = asyncio.create_task(self._watch(request.receive, job, events))
        streaming = False
        try:
            first = await events.get()
            if isinstance(first, ApiError):
                raise first
            if not isinstance(first, Started):
                if first is _STOPPING or self.stopping:
                    raise shutting_down()
                raise ApiError(503, getattr(first, "message", "") or "the request was cancelled before it began")
            reply = Reply(parsed, self.host.info, first)
            if parsed.stream:
                streaming = True
                return EventStream(self._stream(reply, events, job, watcher))
            while True:
                event = await events.get()
                if event is _STOPPING:
                    raise shutting_down()
                if isinstance(event, Verified):
                    reply.add(event)
                elif isinstance(event, Finished):
                    reply.finish(event)
                    if event.reason is FinishReason.ERROR:
                        raise ApiError(500, f"the engine failed: {event.message}", code="engine_error")
                    return JSONResponse(reply.body(job.timed_out))
        except BaseException:
            job.cancel.cancel()
            watcher.cancel()
            raise
        finally:
            if not streaming:
                watcher.cancel()
                self._closed(events)

    async def _stream(
        self, reply: Reply, events: asyncio.Queue[object], job: Job, watcher: asyncio.Task[None]
    ) -> AsyncIterator[bytes]:
        request = reply.request
        try:
            if request.kind == "chat":
                yield _sse(reply.chunk(role=True))
            while True:
                event = await events.get()
                if event is _STOPPING:
                    cut = ApiError(
                        503,
                        f"{SHUTTING_DOWN}: the reply was cut off after {reply.figures.generated} tokens",
                        code="server_shutting_down",
                    )
                    yield _sse(cut.body())
                    yield _sse("[DONE]")
                    return
                if isinstance(event, Verified):
                    text = reply.add(event)
                    fates = fates_of(event) if request.spec.fates else None
                    if text or fates:
                        yield _sse(reply.chunk(text=text, fates=fates))
                elif isinstance(event, Finished):
                    rest = reply.finish(event)
                    if event.reason is FinishReason.ERROR:
                        yield _sse(ApiError(500, f"the engine failed: {event.message}", code="engine_error").body())
                        yield _sse("[DONE]")
                        return
                    if rest:
                        yield _sse(reply.chunk(text=rest))
                    if reply.tool_calls:
                        yield _sse(reply.chunk(tool_calls=reply.tool_calls))
                    last = reply.chunk(finish_reason=reply.finish_reason(job.timed_out))
                    last["speculative"] = reply.speculative(job.timed_out)
                    yield _sse(last)
                    if request.include_usage:
                        yield _sse(reply.usage_chunk(job.timed_out))
                    yield _sse("[DONE]")
                    return
        except Exception as exc:  # the headers are sent: the stream ends with an error event
            log.exception("internal error while streaming a reply")
            yield _sse(ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error").body())
            yield _sse("[DONE]")
        finally:
            job.cancel.cancel()  # a no-op after the end; stops the decode if the stream was closed early
            watcher.cancel()
            self._closed(events)

    async def _watch(self, receive: Receive, job: Job, events: asyncio.Queue[object]) -> None:
        """Cancel ``job`` when its client goes away (the body is read by now: the next message is the
        disconnect); a job still waiting gives up its place in the queue at once."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not job.cancel.cancelled:
                    log.info("client %s went away; its request is cancelled", job.client)
                job.cancel.cancel()
                if self.host.withdraw(job):
                    events.put_nowait(
                        Finished(FinishReason.CANCELLED, GenerationStats(), "the client went away while waiting")
                    )
                return


def _guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint`` answering an unexpected failure with a 500 itself, so the connection stays usable
    (Starlette's last-resort handler re-raises, and uvicorn then drops the connection)."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (ApiError, HTTPException):
            raise
        except Exception as exc:  # any bug in one request is that request's 500
            log.exception("internal error on %s", request.url.path)
            return error_response(ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error"))

    return guarded


def _handlers(paths: frozenset[str]) -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        path = request.url.path
        near = path.rstrip("/")
        message = {
            404: f"no such endpoint: {path}" + (f" (did you mean {near}?)" if near in paths else ""),
            405: f"{request.method} is not allowed on {path}",
        }.get(exc.status_code, str(exc.detail))
        return error_response(ApiError(exc.status_code, message, headers=dict(exc.headers or {})))

    async def internal(request: Request, exc: Exception) -> Response:
        # Only outside the endpoints (they answer their own failures): uvicorn logs the traceback and closes
        # the connection after this answer, so the answer says so.
        return error_response(
            ApiError(
                500, f"internal error: {type(exc).__name__}", code="internal_error", headers={"Connection": "close"}
            )
        )

    return {ApiError: api_error, HTTPException: http_error, Exception: internal}


class _Framing:
    """Refuses what the HTTP parser lets through but this API has no use for: versions other than HTTP/1.0
    and 1.1 (505; ``PRI * HTTP/2.0`` is the start of an HTTP/2 connection) and header fields over
    ``MAX_HEADER_FIELDS`` or ``MAX_HEADER_BYTES`` (431). The connection closes after either."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = framing_refusal(scope["http_version"], scope["headers"])
            if refusal is not None:
                await error_response(refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def framing_refusal(version: str, headers: list[tuple[bytes, bytes]]) -> ApiError | None:
    """The error for a request of HTTP ``version`` with ``headers``, or None when both are fine."""
    close = {"Connection": "close"}
    if version not in HTTP_VERSIONS:
        return ApiError(
            505,
            f"HTTP/{_short(version)} is not supported: this server speaks HTTP/1.1",
            code="http_version_not_supported",
            headers=close,
        )
    if len(headers) > MAX_HEADER_FIELDS:
        return ApiError(
            431,
            f"the request has {len(headers)} header fields; this server takes at most {MAX_HEADER_FIELDS}",
            code="header_fields_too_large",
            headers=close,
        )
    size = sum(len(name) + len(value) for name, value in headers)
    if size > MAX_HEADER_BYTES:
        return ApiError(
            431,
            f"the request's header fields hold {size:,} bytes; this server takes at most {MAX_HEADER_BYTES:,}",
            code="header_fields_too_large",
            headers=close,
        )
    return None


def build_app(host: RequestQueue, config: ServerConfig) -> Starlette:
    """The ASGI application serving ``host``'s pair; ``app.state.stop`` ends its open requests (``Api.stop``)."""
    api = Api(host, config)
    routes = [
        Route("/v1/models", _guarded(api.models), methods=["GET"]),
        Route("/v1/chat/completions", _guarded(api.chat), methods=["POST"]),
        Route("/v1/completions", _guarded(api.completions), methods=["POST"]),
        Route("/health", _guarded(api.health), methods=["GET"]),
    ]
    paths = frozenset(route.path for route in routes)
    app = Starlette(routes=routes, middleware=[Middleware(_Framing)], exception_handlers=_handlers(paths))
    app.router.redirect_slashes = False  # a 307 built from the Host header; a 404 naming the path instead
    app.state.stop = api.stop
    return app


def host_of(header: str) -> str | None:
    """The host a ``Host`` header names, lower-case, without port, brackets or a final dot
    (``[::1]:8080`` -> ``::1``, ``LocalHost.:80`` -> ``localhost``); None when it is not a host and port."""
    match = _HOST.fullmatch(header)
    if match is None:
        return None
    if match["v6"] is not None:
        try:
            address = ipaddress.IPv6Address(match["v6"])
        except ValueError:
            return None
        return str(address)
    name = match["name"].lower()
    return name[:-1] if name.endswith(".") and len(name) > 1 else name


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:79] + "…"
