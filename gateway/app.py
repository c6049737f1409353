"""The HTTP edge: FastAPI routes for /v1 and /fast/v1, SSE streaming, errors, metrics.

Hot streams use a plain ``StreamingResponse`` of pre-encoded bytes (several times faster than
sse-starlette); when the writer falls behind the modeled timeline, the tokens that are already
due go out in one write. (A hand-rolled response without Starlette's task group was tried and
measured slower: 17 vs 14 us of server CPU per token at 64 spark streams.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response, StreamingResponse

from . import anthropic_messages, netem, ws
from .config import Config, load_config
from .errors import APIError
from .openai_chat import ChatStream, completion_body
from .openai_chat import normalise as normalise_chat
from .openai_responses import (
    ResponseEvents,
    ResponseStore,
    StoredResponse,
    conversation_after,
    sse,
)
from .openai_responses import normalise as normalise_responses
from .remote import RemoteTiers
from .schemas import ChatRequest, ResponsesRequest, parse_json, validate
from .service import Gateway, Job

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")


def create_app(config: Config | None = None) -> FastAPI:
    config = config or load_config()
    gateway = Gateway(config)
    store = ResponseStore()
    remote = RemoteTiers(config, gateway)  # tiers served by upstream engines, if any

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await gateway.start()
        await remote.start()
        yield
        await remote.stop()
        await gateway.stop()

    app = FastAPI(title="fastmode", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gateway
    app.state.responses = store
    app.state.remote = remote

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> Response:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = "not_found" if exc.status_code == 404 else None
        msg = f"Unknown path {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return APIError(exc.status_code, msg, code=code).response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        return APIError(400, str(exc.errors()[0].get("msg", "invalid request"))).response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> Response:
        return APIError(500, f"Internal error: {type(exc).__name__}").response()

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response({"status": "ok", "tiers": list(gateway.spec.tiers)})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    for prefix, fast in (("/v1", False), ("/fast/v1", True)):
        _routes(app, gateway, store, prefix, fast)
        anthropic_messages.add_routes(app, gateway, prefix, fast)
    network = netem.install(app, config.server.emulate_rtt_ms)  # --emulate-rtt-ms: HTTP RTTs
    ws.add_routes(app, gateway, store, network)  # Responses WebSocket mode (gateway/ws.py)
    return app


def _headers(job: Job, started: float) -> dict[str, str]:
    h = {
        "x-request-id": job.id,
        "x-fastmode-tier": job.tier.name,
        "openai-processing-ms": str(int((time.perf_counter() - started) * 1000)),
        **job.headers,
    }
    if job.downgraded:
        h["x-fastmode-requested-tier"] = job.requested_tier
    return h


async def _wait_finished(job: Job, request: Request) -> bool:
    """Drain the job's tokens; False if the client went away first (the job is cancelled)."""

    async def drain() -> None:
        async for _ in job.tokens():
            pass

    async def disconnected() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    drain_task = asyncio.ensure_future(drain())
    watch = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({drain_task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not drain_task.done():
            drain_task.cancel()
            job.cancel()
    return drain_task in done and not drain_task.cancelled()


def _routes(app: FastAPI, gateway: Gateway, store: ResponseStore, prefix: str, fast: bool) -> None:
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

    @app.post(prefix + "/chat/completions")
    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        body = parse_json(await request.body())
        req: ChatRequest = validate(ChatRequest, body)
        gen, prompt, cap, want_fast = normalise_chat(req)
        remote: RemoteTiers = request.app.state.remote
        if remote.serves(req.model, fast or want_fast):
            return await remote.chat(request, body, req, prompt, cap, fast or want_fast, started)
        job = gateway.admit(
            model=req.model,
            fast=fast or want_fast,
            request=gen,
            prompt_tokens=prompt,
            max_tokens=cap,
            authorization=request.headers.get("authorization"),
        )
        headers = _headers(job, started)
        if not req.stream:
            ok = await _wait_finished(job, request)
            gateway.settle(job, 200)
            if not ok:
                return Response(status_code=499)
            usage = gateway.usage_dict(job)
            headers["x-fastmode-cost-usd"] = f"{job.cost_usd:.8f}"
            return json_response(completion_body(job, usage), headers=headers)

        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        encoder = ChatStream(job, include_usage)

        async def stream() -> AsyncIterator[bytes]:
            try:
                async for start, times in job.tokens():
                    yield encoder.encode(start, len(times))
                gateway.settle(job, 200)
                yield encoder.finish(gateway.usage_dict(job))
            finally:
                gateway.settle(job, 200)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={**SSE_HEADERS, **headers}
        )

    @app.post(prefix + "/responses")
    async def responses(request: Request) -> Response:
        started = time.perf_counter()
        body = parse_json(await request.body())
        req: ResponsesRequest = validate(ResponsesRequest, body)
        gen, prompt, cap, want_fast, cached, messages = normalise_responses(req, store)
        request.app.state.remote.refuse(req.model, fast or want_fast)
        job = gateway.admit(
            model=req.model,
            fast=fast or want_fast,
            request=gen,
            prompt_tokens=prompt,
            max_tokens=cap,
            cached_tokens=cached,
            authorization=request.headers.get("authorization"),
        )
        headers = _headers(job, started)
        events = ResponseEvents(job, req, gateway.usage_dict(job, chat=False))

        def remember() -> None:
            if req.store is not False:
                store.put(StoredResponse(
                    events.rid, job.model, conversation_after(job, messages),
                    job.prompt_tokens + job.gen.output_tokens,
                ))

        if not req.stream:
            ok = await _wait_finished(job, request)
            gateway.settle(job, 200)
            if not ok:
                return Response(status_code=499)
            remember()
            headers["x-fastmode-cost-usd"] = f"{job.cost_usd:.8f}"
            events.tokens(0, job.gen.output_tokens)
            return json_response(events.response("completed"), headers=headers)

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield sse(events.opening())
                async for start, times in job.tokens():
                    yield sse(events.tokens(start, len(times)))
                gateway.settle(job, 200)
                remember()
                yield sse(events.closing())
            finally:
                gateway.settle(job, 200)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={**SSE_HEADERS, **headers}
        )
