"""Errors in OpenAI's wire format: ``{"error": {"message", "type", "param", "code"}}``.

Every failure the gateway reports goes through ``APIError`` so that the official SDKs map it to
their exception classes (BadRequestError, NotFoundError, RateLimitError, ...) and their retry
logic sees the headers it expects (``retry-after``, ``x-should-retry``).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "service_unavailable_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ERROR_TYPES.get(status, "invalid_request_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self, extra_headers: dict[str, str] | None = None) -> Response:
        headers = dict(self.headers)
        if extra_headers:
            headers.update(extra_headers)
        return Response(
            orjson.dumps(self.body()),
            status_code=self.status,
            media_type="application/json",
            headers=headers,
        )


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def retry_headers(seconds: float) -> dict[str, str]:
    """``retry-after`` (whole seconds, at least 1) and ``retry-after-ms`` (exact)."""
    return {
        "retry-after": str(max(1, int(round(seconds)))),
        "retry-after-ms": str(max(1, int(seconds * 1000))),
    }
