"""The app: the FastAPI app built from every floor below it (protocol plug-ins, the turn
pipeline, the endpoints and features, the edge). Only ``gateway.workers`` is above it.

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
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from fastmode.gateway import batches, dashboard, protocols
from fastmode.gateway.cassettes import hooks as cassettes
from fastmode.gateway.config import Config, load_config
from fastmode.gateway.edge import health, lora_metrics, replica_health
from fastmode.gateway.edge.lane import Endpoint, Lane
from fastmode.gateway.edge.shutdown import Shutdown
from fastmode.gateway.edge.turn_http import RAW_SEND, http_endpoint
from fastmode.gateway.edge.watchdog import Watchdog
from fastmode.gateway.endpoints import (
    admin,
    conversations,
    count_tokens,
    embeddings,
    responses_api,
    traces_api,
    vllm_api,
)
from fastmode.gateway.endpoints import testing_api as test_api
from fastmode.gateway.endpoints.background import Background
from fastmode.gateway.endpoints.models_api import add_routes as add_model_routes
from fastmode.gateway.endpoints.stored_chat_api import add_routes as add_stored_chat_routes
from fastmode.gateway.errors import APIError
from fastmode.gateway.http import netem
from fastmode.gateway.http.limits import BodyLimit
from fastmode.gateway.observe import vllm_metrics
from fastmode.gateway.observe.host_lag import HostLag
from fastmode.gateway.observe.kv_events import KVEvents
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.pipeline.per_test import PerTest
from fastmode.gateway.pipeline.turn_errors import internal_error
from fastmode.gateway.remote import RemoteTiers
from fastmode.gateway.state import StateBackend
from fastmode.gateway.state.health import StateCollector
from fastmode.gateway.stored import ledger
from fastmode.gateway.stored.response_store import ResponseStore
from fastmode.gateway.values.ids import new_id
from fastmode.gateway.websocket import add_routes as add_websocket_routes

log = logging.getLogger("fastmode.app")


class _QuietCuts(logging.Filter):
    """Streams the gateway ends on purpose (a ``cut`` fault, a stalled reader) end without
    their last chunk; uvicorn logs that as an error. The gateway logs its own line for each."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


class _App(FastAPI):
    """FastAPI with the server's own ``send`` in each scope (``RAW_SEND``), for the streaming
    hot path: one dict store per request saves three wrapper calls per token event, and lets
    the engine's step write token events itself (push mode, ``gateway.pipeline.push``).

    Token events written with it skip the middleware added to this app, so it is offered only
    while every such middleware is one known not to touch a response body (``RAW_SEND_SAFE``).
    Add any other (``GZipMiddleware`` rewrites bodies) and streams go through the middleware's
    ``send``, written by the turn's own task: correct, at Starlette's cost per event (a warning
    says so at the first request). Middleware wrapped around the app from outside gets the
    server's send through this app's ``send`` argument, so it sees every byte either way."""

    raw_send_ok: bool | None = None  # decided at the first request (middleware is fixed then)
    lane: Lane | None = None  # the model endpoints past the framework (``gateway.edge.lane``)
    endpoints: dict[str, Endpoint]  # path -> model endpoint, for the lane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ok = self.raw_send_ok
        if ok is None:
            ok = self.raw_send_ok = _raw_send_ok(self)
            if ok:  # (a middleware that may rewrite bodies sees every request: no lane)
                self.lane = Lane(self, self.endpoints, internal_error)
        if ok:
            scope[RAW_SEND] = send
            lane = self.lane
            if lane is not None and lane.takes(scope):
                scope["app"] = self  # (its middleware's answers read it, as the lane's route)
                await lane.asgi(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


# middleware of this app that never rewrites a response body: the raw send may skip it
RAW_SEND_SAFE: tuple[Any, ...] = (BodyLimit, netem.NetemMiddleware)


def _raw_send_ok(app: FastAPI) -> bool:
    other = [m.cls for m in app.user_middleware if m.cls not in RAW_SEND_SAFE]
    if other:
        log.warning("middleware %s may rewrite response bodies: streams are written through "
                    "it, not with the server's own send (slower per event)",
                    ", ".join(getattr(c, "__name__", repr(c)) for c in other))
    return not other


def create_app(config: Config | None = None, state: StateBackend | None = None) -> FastAPI:
    config = config or load_config()
    gateway = Gateway(config, state)
    # fastmode_state_*: whether the shared state answers (gateway.state.health)
    gateway.metrics.registry.register(StateCollector(gateway.state.health))
    remote = RemoteTiers(config, gateway.metrics, gateway.settle)  # upstream engines' tiers
    gateway.backends.update(dict.fromkeys(remote.pools, remote))  # one admission path
    # --record / --replay (gateway.cassettes): replaying, every tier's backend is the replay's
    gateway.cassettes = cassettes.install(config, gateway.engine, gateway.spec.tiers,
                                          gateway.backends)
    if config.admin.enabled and gateway.cassettes is not None:  # the pytest plugin's tests
        gateway.backends.update({name: PerTest(gateway.backend(tier), gateway.engine,
                                               gateway.tests, gateway.cassettes.tests)
                                 for name, tier in gateway.spec.tiers.items()})
    watchdog = Watchdog(gateway)
    shutdown = Shutdown(gateway)
    health_of_replicas = replica_health.ReplicaHealth(gateway)
    lag = HostLag(gateway)  # fastmode_host_lag_seconds, its warning
    kv_events = KVEvents()  # vLLM's KV-cache events over ZMQ (gateway.observe.kv_events)
    logging.getLogger("uvicorn.error").addFilter(_QuietCuts())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        health_of_replicas.attach()  # replica failures: counted, their turns answered
        lag.attach()  # replicas that slip: counted, logged
        vllm_metrics.install(gateway, set(config.remote.tiers))  # vllm:* names (engines' pods)
        lora_metrics.install(gateway)  # vllm:lora_requests_info (deployments with adapters)
        kv_events.install(gateway)
        await remote.start()
        watchdog.start()
        yield
        await watchdog.stop()
        await background.stop()
        await batch_api.close()
        await remote.stop(config.server.shutdown_grace_s)
        await gateway.stop(config.server.shutdown_grace_s)
        await kv_events.stop()

    # FastAPI's native OpenTelemetry looks up the global providers on every request; fastmode
    # exports its own metrics (/metrics) and keeps that lookup off the hot path
    app = _App(title="fastmode", lifespan=lifespan, docs_url=None, redoc_url=None,
               telemetry={"tracing": False, "metrics": False, "logs": False})
    app.state.gateway = gateway
    app.state.responses = ResponseStore(gateway.state)
    app.state.background = background = Background(gateway)  # background: true (Responses)
    app.state.remote = remote
    app.state.watchdog = watchdog
    app.state.replica_health = health_of_replicas
    app.state.host_lag = lag
    app.state.shutdown = shutdown
    app.state.kv_events = kv_events
    _error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=config.limits.max_body_bytes, answer=_answer)
    health.add_routes(app, gateway)
    dashboard.add_routes(app, gateway)  # /dashboard: the live view (fastmode/gateway/dashboard)
    ledger.add_routes(app, gateway.state)
    embeddings.add_routes(app, gateway)  # POST /v1/embeddings (fastmode/gateway/endpoints/embeddings.py)
    conversations.add_routes(app)  # /v1/conversations: refused with a 400 (not served)
    batch_api = batches.add_routes(app, gateway)  # /v1/files, /v1/batches, messages/batches
    if config.admin.enabled:
        admin.add_routes(app, gateway)
    if config.server.engine:
        vllm_api.add_routes(app, gateway)  # /tokenize, /sleep, ... (an engine's vLLM surface)
    test_api.add_routes(app, gateway.tests, config.admin.enabled,
                        gateway.cassettes.tests if gateway.cassettes is not None else None)  # the pytest plugin's

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(gateway.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    bodies: dict[str, Any] = {}  # request-body schemas, for /openapi.json
    hot: list[Route] = []
    app.endpoints = {}
    for prefix, fast in (("/v1", False), ("/fast/v1", True)):
        add_model_routes(app, gateway, prefix, fast)  # OpenAI's or Anthropic's shape
        for path, protocol in protocols.ENDPOINTS.items():
            endpoint = http_endpoint(protocol, fast)
            app.add_api_route(prefix + path, endpoint, methods=["POST"],
                              openapi_extra=_request_body(protocol.schema, bodies,
                                                          gateway.models))
            hot.append(Route(prefix + path, endpoint, methods=["POST"]))
            app.endpoints[prefix + path] = endpoint
    # The model endpoints are served by plain Starlette routes in front of FastAPI's: the
    # endpoint takes the Request and answers itself (no dependencies to solve), and FastAPI's
    # per-request wrapping (exit stacks, dependency solving, telemetry) was a quarter of a
    # request's cost. FastAPI's routes stay behind them for /openapi.json.
    app.router.routes[:0] = hot
    _openapi_with_bodies(app, bodies)
    network = netem.install(app, config.server.emulate_rtt_ms, config.server.time_scale)  # --emulate-rtt-ms: HTTP RTTs
    add_websocket_routes(app, gateway, network)  # Responses WebSocket mode (fastmode/gateway/websocket)
    responses_api.add_routes(app)  # GET/DELETE /v1/responses/{id}, .../input_items, cancel
    count_tokens.add_routes(app, _request_body(  # POST /v1/messages/count_tokens
        count_tokens.CountTokensRequest, bodies, gateway.models))
    add_stored_chat_routes(app)  # stored Chat Completions: GET/POST/DELETE .../{id}, list
    traces_api.add_routes(app)  # GET /v1/fastmode/traces: ground truth per request (JSONL)
    return app


def _request_body(model: type[BaseModel], defs: dict[str, Any],
                  models: list[str]) -> dict[str, Any]:
    """The route's request body as its pydantic model describes it, with the served model
    ids. The endpoints read the raw body themselves (so a bad one is the protocol's own 400,
    not FastAPI's 422); this only tells ``/openapi.json`` — and schema-driven fuzzers — what
    they accept."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    defs.update(schema.pop("$defs", {}))
    if "model" in schema.get("properties", {}):  # any string is a 404 unless it is routed
        schema["properties"]["model"] = {
            "title": "Model", "type": "string", "enum": models,
            "description": "A model id of [routes] in the config (GET /v1/models)."}
    defs[model.__name__] = schema
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def _openapi_with_bodies(app: FastAPI, defs: dict[str, Any]) -> None:
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(defs)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _answer(path: str, error: APIError) -> Response:
    return protocols.for_path(path).error_response(error, new_id("req"))


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

