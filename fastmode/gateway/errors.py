"""Errors in OpenAI's wire format: ``{"error": {"message", "type", "param", "code"}}``.

Every failure the gateway reports goes through ``APIError`` so that the official SDKs map it to
their exception classes (BadRequestError, NotFoundError, RateLimitError, ...) and their retry
logic sees the headers it expects (``retry-after``, ``x-should-retry``).
"""

from __future__ import annotations

import math
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
        code: str | int | None = None,  # vLLM's errors carry the status (an engine's)
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
    """``retry-after-ms`` (whole milliseconds) and ``retry-after`` (whole seconds), both
    rounded up and the one from the other (``retry-after`` = ceil(``retry-after-ms`` / 1000)):
    a client that waits either never retries before the stated time (a rounded-down figure
    sends it back while the cause still holds). At least 1 ms and 1 s."""
    ms = max(1, math.ceil(round(seconds * 1000, 6)))  # round(): 1.1 s is 1100 ms, not 1101
    return {"retry-after": str(math.ceil(ms / 1000)), "retry-after-ms": str(ms)}
