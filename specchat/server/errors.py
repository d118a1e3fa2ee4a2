"""Errors as the OpenAI API shapes them: ``{"error": {"message", "type", "param", "code"}}`` with a status."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the server refuses; ``status`` is the HTTP status, ``str(error)`` one line for the client."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code
        self.kind = kind or _KINDS.get(status, "server_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    503: "server_error",
    505: "invalid_request_error",
}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 naming the offending parameter."""
    return ApiError(400, message, param=param, code=code)
