"""``GET /v1/models`` and ``GET /v1/models/{id}``, in the shape of the provider that asks.

Both providers serve their model list on the same path, so the request says which it is: a
request with an ``anthropic-version`` header (every Anthropic SDK sends one) gets Anthropic's
shape — each model ``{"type": "model", "id", "display_name", "created_at"}`` (an RFC 3339
time), the list ``{"data", "has_more", "first_id", "last_id"}`` paged with ``limit`` (1-1000,
default 20), ``after_id`` and ``before_id`` (the page just after / before that model: what the
SDK's auto-pagination follows), errors in Anthropic's body (``not_found_error`` for an unknown
id, ``invalid_request_error`` for a bad ``limit`` or an unknown cursor). Any other request gets
OpenAI's (``{"object": "list", "data": [...]}``, each ``{"id", "object": "model", "created",
"owned_by"}``), with fastmode's ``context_window`` and ``roles`` beside them.

Every model of ``[routes]`` is listed, in the config's order; ``created`` / ``created_at`` is
when the gateway started (a mock has no release dates). An engine (``fastmode engine``) adds
vLLM's ``root``, ``parent`` and ``max_model_len`` to OpenAI's cards and lists its LoRA adapters
after the models, each with ``parent`` = the model it adapts and ``root`` = its path, as vLLM's
``/v1/models`` does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from fastmode.gateway import protocols
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.values.ids import new_id

ANTHROPIC_MAX_LIMIT = 1000
ANTHROPIC_DEFAULT_LIMIT = 20


def is_anthropic(headers: Mapping[str, str]) -> bool:
    return "anthropic-version" in headers


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def anthropic_page(ids: list[str], params: Mapping[str, str]) -> tuple[list[str], bool]:
    """The ids of one page of Anthropic's cursor paging, and whether there are more in the
    page's direction (``before_id`` pages backwards, as the SDK follows it)."""
    try:
        limit = int(params.get("limit", ANTHROPIC_DEFAULT_LIMIT))
    except ValueError:
        raise bad_request("limit: Input should be a valid integer", param="limit") from None
    if not 1 <= limit <= ANTHROPIC_MAX_LIMIT:
        raise bad_request(f"limit: Input should be between 1 and {ANTHROPIC_MAX_LIMIT}",
                          param="limit")
    lo, hi = 0, len(ids)
    for name in ("after_id", "before_id"):
        cursor = params.get(name)
        if cursor is None:
            continue
        if cursor not in ids:
            raise bad_request(f"{name}: no model with id '{cursor}'.", param=name)
        at = ids.index(cursor)
        lo, hi = (max(lo, at + 1), hi) if name == "after_id" else (lo, min(hi, at))
    window = ids[lo:hi]
    if "before_id" in params:
        return window[-limit:], len(window) > limit
    return window[:limit], len(window) > limit


def add_routes(app: FastAPI, gateway: Gateway, prefix: str, fast: bool) -> None:
    engine = gateway.config.server.engine

    def openai_card(model: str) -> dict[str, Any]:
        adapter = gateway.loras.get(model)
        if adapter is not None:
            card = openai_card(adapter.base_model)
            return {**card, "id": model, "root": adapter.path, "parent": adapter.base_model}
        routed = gateway.router.route(model, "fast" if fast else "standard")  # 404 if unknown
        vllm = ({"root": model, "parent": None, "max_model_len": routed.tier.context_window}
                if engine else {})
        return {
            "id": model,
            "object": "model",
            "created": int(gateway.started_at),
            "owned_by": "fastmode",
            "context_window": routed.tier.context_window,
            # the roles the model offers (its tiers' names are the config's own, never shown)
            "roles": sorted(gateway.config.routes[gateway.config.route_of(model) or model].roles()),
            **vllm,
        }

    def anthropic_card(model: str) -> dict[str, Any]:
        if gateway.config.route_of(model) is None:
            raise APIError(404, f"model: {model}", code="not_found")
        routed = gateway.router.route(model, "fast" if fast else "standard")
        return {
            "type": "model",
            "id": model,
            "display_name": model,  # the config names models by id only
            "created_at": rfc3339(gateway.started_at),
            "max_input_tokens": routed.tier.context_window,
        }

    def anthropic_error(error: APIError) -> Response:
        return protocols.MESSAGES.error_response(error, new_id("req"))

    @app.get(prefix + "/models")
    async def list_models(request: Request) -> Response:
        if not is_anthropic(request.headers):
            ids = [*gateway.models, *gateway.loras.bases]  # the adapters after the models
            return json_response({"object": "list", "data": [openai_card(m) for m in ids]})
        try:
            page, more = anthropic_page(list(gateway.models), request.query_params)
        except APIError as exc:
            return anthropic_error(exc)
        return json_response({"data": [anthropic_card(m) for m in page], "has_more": more,
                              "first_id": page[0] if page else None,
                              "last_id": page[-1] if page else None})

    @app.get(prefix + "/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> Response:
        if not is_anthropic(request.headers):
            return json_response(openai_card(model_id))
        try:
            return json_response(anthropic_card(model_id))
        except APIError as exc:
            return anthropic_error(exc)
