"""``POST /v1/embeddings``: OpenAI's embeddings, deterministic, timed and priced by physics.

The vectors come from ``backends.embeddings`` (hashed word and character n-grams: the same
text gives the same vector, similar texts are closer than unrelated ones); the answer is
OpenAI's shape, ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
"model", "usage": {"prompt_tokens", "total_tokens"}}``, with ``cost_usd`` in the usage as
every fastmode usage has. ``input`` is a string, a list of strings, a list of token ids or a
list of token-id lists; ``dimensions`` shortens a ``text-embedding-3`` vector (its first N
coordinates, renormalised); ``encoding_format`` is ``float`` or ``base64`` (little-endian
float32, as the SDK decodes it). The reply is held for the modeled time of the pool's prefill
steps (``EmbeddingPool``) and billed at the derived (or configured) price; the ledger gets a
row on the ``embeddings`` tier, owned by the key. Errors are OpenAI's: 400 naming the field,
404 for an unknown model, 401 without a key when auth is on.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from fastmode.backends.embeddings import EmbeddingPool, embed, prefill_cost_per_token, shortened
from fastmode.backends.perf import Placement
from fastmode.backends.tokenizer import count_tokens
from fastmode.gateway import money
from fastmode.gateway.config import EmbeddingModelConfig
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.http.offload import off_loop, parse_body
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.protocols import CHAT
from fastmode.gateway.state import COMPLETED, UsageRow
from fastmode.gateway.values.ids import new_id

TIER = "embeddings"  # the ledger's tier for embedding requests
hold = asyncio.sleep  # how a reply waits for its modeled time (tests record it instead)


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    dimensions: int | None = Field(None, ge=1)
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


@dataclass(frozen=True)
class Served:
    """One embedding model id: its pool and its price (USD per million tokens)."""

    config: EmbeddingModelConfig
    pool: EmbeddingPool
    price: float


def serving(gateway: Gateway) -> dict[str, Served]:
    """Every ``[embeddings.models]`` id with its pool; prices derived from the reference tier's
    margin on prefill unless the config gives one."""
    cfg = gateway.config.embeddings
    catalog = gateway.spec.catalog
    ref = gateway.spec.tiers[gateway.config.pricing.reference_tier]
    # the reference tier's input price over its own prefill cost, both per million tokens
    margin = ref.prices.input / (prefill_cost_per_token(ref.deployment.placement) * 1e6)
    out = {}
    for name, m in cfg.models.items():
        placement = Placement(catalog.get_model(m.model), catalog.get_hardware(cfg.hardware),
                              cfg.chips, cfg.precision)
        pool = EmbeddingPool(placement, cfg.batch_tokens, cfg.seq_tokens)
        price = m.price if m.price is not None else pool.cost_per_token() * 1e6 * margin
        out[name] = Served(m, pool, price)
    return out


def _inputs(req: EmbeddingsRequest, limit: int) -> list[str | list[int]]:
    raw = req.input
    items: list[Any] = [raw] if isinstance(raw, str) else list(raw)
    if items and all(isinstance(x, int) for x in items):
        items = [items]  # one input given as token ids
    if not items:
        raise bad_request("'$.input' is invalid: it must not be empty.", param="input")
    if len(items) > limit:
        raise bad_request(f"'$.input' is too long: {len(items)} inputs, at most {limit} per "
                          "request.", param="input")
    for i, item in enumerate(items):
        if (isinstance(item, str) and not item) or (isinstance(item, list) and not item):
            raise bad_request(f"'$.input[{i}]' is invalid: an input must not be empty.",
                              param="input")
    return items


def _tokens(items: list[str | list[int]], per_input: int, per_request: int) -> int:
    total = 0
    for i, item in enumerate(items):
        n = len(item) if isinstance(item, list) else count_tokens(item)
        if n > per_input:
            raise bad_request(f"This model's maximum context length is {per_input} tokens, "
                              f"however you requested {n} tokens in input {i}. Please reduce "
                              "your prompt.", param="input")
        total += n
        if total > per_request:
            raise bad_request(f"The request has more than {per_request} tokens in all; "
                              "split it.", param="input")
    return total


def _vectors(items: list[str | list[int]], full: int, dims: int, b64: bool) -> list[Any]:
    out: list[Any] = []
    for item in items:
        vec = embed(item, full) if isinstance(item, str) else embed("", full, item)
        if dims != full:
            vec = shortened(vec, dims)
        out.append(base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if b64 else vec)
    return out


async def create(request: Request) -> Response:
    request_id = new_id("req")
    try:
        return await _create(request, request_id)
    except APIError as exc:
        return CHAT.error_response(exc, request_id)


async def _create(request: Request, request_id: str) -> Response:
    gateway: Gateway = request.app.state.gateway
    served: dict[str, Served] = request.app.state.embeddings
    cfg = gateway.config.embeddings
    body = parse_body(await request.body(), gateway.config.limits)
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object.")
    try:
        req = EmbeddingsRequest.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "body"
        raise bad_request(f"Invalid value for '{field}': {err['msg']}.", param=field) from None
    principal = gateway.auth.authenticate(request.headers.get("authorization"))
    model = served.get(req.model)
    if model is None:
        raise APIError(404, f"The model '{req.model}' does not exist or you do not have "
                       f"access to it. Embedding models: {', '.join(served)}.",
                       code="model_not_found", param="model")
    full = model.config.dimensions
    dims = full if req.dimensions is None else req.dimensions
    if req.dimensions is not None and not model.config.shortenable:
        raise bad_request(f"The model '{req.model}' does not support specifying dimensions.",
                          param="dimensions")
    if dims > full:
        raise bad_request(f"'dimensions' must be at most {full} for '{req.model}'.",
                          param="dimensions")
    items = _inputs(req, cfg.max_inputs)
    tokens = _tokens(items, cfg.max_input_tokens, cfg.max_request_tokens)
    started = time.monotonic()
    vectors = await off_loop(len(items) * dims * 4, _vectors, items, full, dims,
                             req.encoding_format == "base64")
    # the reply is ready when the modeled pool has run its prefill steps
    await hold(max(0.0, model.pool.seconds(tokens) - (time.monotonic() - started)))
    cost = money.cost(tokens * model.price / 1e6)
    gateway.record(UsageRow(
        request_id=request_id, ts=time.time(),
        api_key=principal.id if principal is not None else "", model=req.model,
        tier_requested=TIER, tier_served=TIER, protocol="embeddings", transport="http",
        status=200, ended=COMPLETED, input_tokens=tokens, cost_usd=cost))
    return json_response({
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": v}
                 for i, v in enumerate(vectors)],
        "model": req.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "cost_usd": cost},
    }, headers={"x-request-id": request_id})


def add_routes(app: FastAPI, gateway: Gateway) -> None:
    app.state.embeddings = serving(gateway)
    for prefix in ("/v1", "/fast/v1"):
        app.add_api_route(prefix + "/embeddings", create, methods=["POST"])
