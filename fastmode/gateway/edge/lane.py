"""The model endpoints' own lane: a POST to a model endpoint skips the framework's per-request stack.

A streamed request of a few tokens costs the gateway a few hundred microseconds, and a tenth of
that was Starlette's and FastAPI's wrapping of every request: the outer error middleware, the
exception middleware, FastAPI's exit stack and telemetry layers, the router's match over every
route, and the request/response wrappers around the endpoint, each a coroutine (and, for the
response start and end, a ``send`` wrapper). The model endpoints need none of it: each reads
its own body and answers every error in its protocol's own format itself.

So ``Lane`` sends ``POST`` to a model endpoint's path straight to the endpoint, through the
middleware added to the app (its body limit, the network emulation: built around the lane in
the same order Starlette builds them around its router), and does what the outer layers did for
what the endpoint does not catch: an ``APIError`` (a body over the limit, raised while it is
read) becomes the route's error response, anything else is logged and answered 500 in the
route's format, as the app's own handlers answer it. Every other request (and every request,
when a middleware not known to be transparent is added: it must see them all) takes the full
stack.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from fastmode.gateway import protocols
from fastmode.gateway.errors import APIError
from fastmode.gateway.values.ids import new_id

log = logging.getLogger("fastmode.app")

Endpoint = Callable[[Request], Awaitable[Response]]


class Lane:
    """``POST`` to the model endpoints, past the framework (see the module doc)."""

    def __init__(self, app: Any, endpoints: dict[str, Endpoint],
                 internal: Callable[[Exception], APIError]) -> None:
        self.app = app
        self.endpoints = endpoints  # path -> the protocol's endpoint
        self.internal = internal  # an unexpected exception -> the 500 to answer
        self.asgi: ASGIApp = self._dispatch
        for middleware in reversed(app.user_middleware):  # as Starlette stacks them
            self.asgi = middleware.cls(self.asgi, *middleware.args, **middleware.kwargs)

    def takes(self, scope: Scope) -> bool:
        return (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] in self.endpoints)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]  # (``scope["app"]`` is set by the app, before the middleware)
        request = Request(scope, receive, send)
        try:
            response = await self.endpoints[path](request)
        except APIError as error:  # e.g. the body limit's 413, raised while the body is read
            response = protocols.for_path(path).error_response(error, new_id("req"))
        except Exception as exc:
            log.error("unhandled error on POST %s", path, exc_info=exc)
            response = protocols.for_path(path).error_response(self.internal(exc),
                                                               new_id("req"))
        await response(scope, receive, send)
