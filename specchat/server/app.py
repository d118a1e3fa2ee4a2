"""The Starlette application: routes, authentication, limits, streaming, and errors in the OpenAI shape.

Safe by default: a Bearer key when one is set (compared in constant time);
bodies over the limit refused before they are read in full (413); JSON bodies
only (415 otherwise, so a web page cannot post here without a CORS preflight,
which is never granted); on a loopback address, only loopback ``Host`` names
(no DNS rebinding). Every failure is an OpenAI-shaped error with its status; an
unexpected one is a 500 and the server goes on. No request names a file: the
pair is chosen on the command line.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specchat.core.types import Finished, FinishReason, Verified
from specchat.server import protocol
from specchat.server.errors import ApiError
from specchat.server.replies import Reply, fates_of
from specchat.server.request_queue import Job, RequestQueue, Started

log = logging.getLogger("specchat.server")

DEFAULT_MAX_BODY = 4 << 20  # 4 MiB: a long conversation is far less; a context's worth of text is under 1 MiB
DEFAULT_TIME_LIMIT = 300.0
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


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
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)


class Api:
    """The endpoints over one :class:`RequestQueue`."""

    def __init__(self, host: RequestQueue, config: ServerConfig) -> None:
        self.host = host
        self.config = config

    # ---- checks common to every request

    def _check_access(self, request: Request) -> None:
        if self.config.loopback_only_hosts:
            name = _host_name(request.headers.get("host", ""))
            if name and name.lower() not in _LOOPBACK_NAMES:
                raise ApiError(403, f"this server answers only to localhost, not to Host {name!r}",
                               kind="permission_error", code="host_not_allowed")
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(401, "invalid or missing API key: send Authorization: Bearer <key>",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    async def _body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"the request body is {int(declared):,} bytes; this server takes at most {limit:,}",
                           code="body_too_large")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise ApiError(415, "send the request body as JSON with Content-Type: application/json",
                           code="unsupported_media_type")
        chunks = bytearray()
        try:
            async for chunk in request.stream():
                chunks += chunk
                if len(chunks) > limit:
                    raise ApiError(413, f"the request body is over {limit:,} bytes, this server's limit",
                                   code="body_too_large")
        except ClientDisconnect:
            raise ApiError(400, "the client closed the connection before sending the whole body") from None
        return bytes(chunks)

    # ---- endpoints

    async def models(self, request: Request) -> Response:
        self._check_access(request)
        info = self.host.info
        return JSONResponse({"object": "list", "data": [{
            "id": info.model_id, "object": "model", "created": 0, "owned_by": "specchat",
            "specchat": {"target": info.target, "draft": info.draft, "mtp": info.has_mtp, "context": info.n_ctx,
                         "default_drafter": info.default_drafter,
                         "placement": {"target": info.placement[0], "draft": info.placement[1]}},
        }]})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "busy": self.host.busy, "waiting": self.host.waiting})

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, protocol.parse_chat)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, protocol.parse_completion)

    async def _generate(self, request: Request,
                        parse: Callable[[dict[str, Any], protocol.Defaults], protocol.Request]) -> Response:
        self._check_access(request)
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
        watcher = asyncio.create_task(_cancel_on_disconnect(request.receive, job))
        try:
            first = await events.get()
            if isinstance(first, ApiError):
                raise first
            if not isinstance(first, Started):
                raise ApiError(503, getattr(first, "message", "") or "the request was cancelled before it began")
            reply = Reply(parsed, self.host.info, first)
            if parsed.stream:
                return EventStream(self._stream(reply, events, job, watcher))
            while True:
                event = await events.get()
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
            if not parsed.stream:
                watcher.cancel()

    async def _stream(self, reply: Reply, events: asyncio.Queue[object], job: Job,
                      watcher: asyncio.Task[None]) -> AsyncIterator[bytes]:
        request = reply.request
        try:
            if request.kind == "chat":
                yield _sse(reply.chunk(role=True))
            while True:
                event = await events.get()
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
        finally:
            job.cancel.cancel()  # a no-op after the end; stops the decode if the stream was closed early
            watcher.cancel()


async def _cancel_on_disconnect(receive: Receive, job: Job) -> None:
    """Cancel ``job`` when its client goes away (the body is read by now: the next message is the disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not job.cancel.cancelled:
                log.info("client %s went away; its request is cancelled", job.client)
            job.cancel.cancel()
            return


def _handlers() -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = {404: f"no such endpoint: {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return error_response(ApiError(exc.status_code, message, headers=dict(exc.headers or {})))

    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("internal error on %s", request.url.path)
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error"))

    return {ApiError: api_error, HTTPException: http_error, Exception: internal}


def build_app(host: RequestQueue, config: ServerConfig) -> Starlette:
    """The ASGI application serving ``host``'s pair."""
    api = Api(host, config)
    routes = [
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/health", api.health, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers=_handlers())


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8080`` -> ``[::1]``)."""
    if header.startswith("["):
        return header.split("]")[0] + "]"
    return header.rsplit(":", 1)[0]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
