"""The HTTP edge: builds the FastAPI app from the protocol plug-ins and the turn pipeline.

Hot streams use a plain ``StreamingResponse`` of pre-encoded bytes (several times faster than
sse-starlette). A hand-rolled response without Starlette's task group was tried and measured
slower (17 vs 14 us of server CPU per token at 64 spark streams).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from . import netem, protocols
from .admission import Gateway
from .config import Config, load_config
from .errors import APIError
from .ids import new_id
from .remote import RemoteTiers
from .response_store import ResponseStore
from .turn import http_endpoint, internal_error, json_response
from .websocket import add_routes as add_websocket_routes

log = logging.getLogger("fastmode.app")


def create_app(config: Config | None = None) -> FastAPI:
    config = config or load_config()
    gateway = Gateway(config)
    remote = RemoteTiers(config, gateway)  # tiers served by upstream engines, if any

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        await remote.start()
        yield
        await remote.stop()
        await gateway.stop()

    app = FastAPI(title="fastmode", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gateway
    app.state.responses = ResponseStore()
    app.state.remote = remote
    _error_handlers(app)

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response({"status": "ok", "tiers": list(gateway.spec.tiers)})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    for prefix, fast in (("/v1", False), ("/fast/v1", True)):
        _model_routes(app, gateway, prefix, fast)
        for path, protocol in protocols.ENDPOINTS.items():
            app.add_api_route(prefix + path, http_endpoint(protocol, fast), methods=["POST"])
    network = netem.install(app, config.server.emulate_rtt_ms)  # --emulate-rtt-ms: HTTP RTTs
    add_websocket_routes(app, gateway, network)  # Responses WebSocket mode (gateway/websocket)
    return app


def _error_handlers(app: FastAPI) -> None:
    """Errors outside a route's own handling, in the format of the route's protocol."""

    def answer(request: Request, error: APIError) -> Response:
        return protocols.for_path(request.url.path).error_response(error, new_id("req"))

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> Response:
        return answer(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            error = APIError(404, f"Unknown path {request.url.path}", code="not_found")
        elif exc.status_code == 405:
            error = APIError(405, f"Method {request.method} is not allowed on "
                             f"{request.url.path}.", code="method_not_allowed")
        else:
            error = APIError(exc.status_code, str(exc.detail))
        return answer(request, error)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        return answer(request, APIError(400, str(exc.errors()[0].get("msg", "invalid request"))))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> Response:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return answer(request, internal_error(exc))


def _model_routes(app: FastAPI, gateway: Gateway, prefix: str, fast: bool) -> None:
    def model_card(model: str) -> dict[str, Any]:
        tier = gateway.resolve(model, fast)
        return {
            "id": model,
            "object": "model",
            "created": int(gateway.started_at),
            "owned_by": "fastmode",
            "context_window": tier.context_window,
            "tier": tier.name,
        }

    @app.get(prefix + "/models")
    async def list_models() -> Response:
        return json_response({"object": "list", "data": [model_card(m) for m in gateway.models]})

    @app.get(prefix + "/models/{model_id:path}")
    async def get_model(model_id: str) -> Response:
        return json_response(model_card(model_id))
