"""What happens when a tier cannot take a request: the fast pool full, or every queue full.

``server.fast_overflow``: ``reject`` answers 429 (as Anthropic's fast mode does when its pool is
busy); ``downgrade`` serves the request on the standard tier and bills it there (the response
says so in ``x-fastmode-requested-tier``). A full waiting queue is 503 ``server_is_overloaded``
(or 429, per ``server.overload_status``).
"""

from __future__ import annotations

from .config import ServerConfig
from .errors import APIError, retry_headers


def fast_full(tier: str, server: ServerConfig) -> APIError:
    return APIError(
        429,
        f"The {tier} tier is at capacity. Retry shortly or use the standard tier.",
        code="rate_limit_exceeded",
        type="requests",
        headers=retry_headers(server.retry_after_s),
    )


def overloaded(server: ServerConfig) -> APIError:
    status = server.overload_status
    return APIError(
        status,
        "The server is overloaded: the engine's waiting queue is full. Retry shortly.",
        code="server_is_overloaded" if status == 503 else "rate_limit_exceeded",
        type="service_unavailable_error" if status == 503 else "requests",
        headers=retry_headers(server.retry_after_s),
    )
