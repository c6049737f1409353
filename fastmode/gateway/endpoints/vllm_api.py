"""vLLM's own routes on an engine (``fastmode engine``), in vLLM's request and response shapes.

* ``POST /tokenize``: a completion form ``{"prompt", "add_special_tokens", "return_token_strs"}``
  or a chat form ``{"messages", "tools", "add_generation_prompt", ...}`` (``model`` optional in
  both); answers ``{"count", "max_model_len", "tokens", "token_strs"}``. The ids are the ones
  the engine hashes into its prefix-cache blocks for the same prompt on ``/v1/completions`` or
  ``/v1/chat/completions`` (``backends.token_ids``), so a router can compute block hashes.
* ``POST /detokenize``: ``{"model", "tokens"}`` -> ``{"prompt"}``; an id this engine never
  produced is a 400 (fastmode has no vocabulary file).
* ``POST /reset_prefix_cache``: empties every replica's prefix cache (``AllBlocksCleared`` on
  the KV-event stream); a 400 while running sequences hold blocks.
* ``POST /sleep?level=1|2``, ``POST /wake_up``, ``GET /is_sleeping`` (vLLM's sleep mode,
  ``backends.sleep``): asleep, model requests answer 503; ``/wake_up`` returns once the
  modeled copy of the weights back to the chips is over (its seconds in
  ``x-fastmode-wake-seconds``).
* ``POST /v1/load_lora_adapter``, ``POST /v1/unload_lora_adapter`` (``lora_api``, when run-time
  LoRA updates are allowed) and the render routes (``render_api``).

Errors are OpenAI's ``{"error": {...}}`` body, as vLLM's are.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from fastmode.backends.mockmodel.request import ToolSpec
from fastmode.backends.sleep import LEVELS, SleepState, wake_seconds
from fastmode.backends.token_ids import tool_dict
from fastmode.gateway.endpoints import lora_api, render_api
from fastmode.gateway.errors import bad_request
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.pipeline.admission import Gateway


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # vLLM logs unknown fields and goes on


class TokenizeCompletion(_Body):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChat(_Body):
    model: str | None = None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_token_strs: bool = False


class Detokenize(_Body):
    model: str | None = None
    tokens: list[int] = Field(max_length=1 << 22)


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body


def _parse(model: type[_Body], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        raise bad_request(f"{where}: {err.get('msg')}", param=where or None) from None


def add_routes(app: FastAPI, gateway: Gateway) -> None:
    engine = gateway.engine
    vocab = engine.vocabulary

    def window(model: str | None) -> int:
        name = model if model is not None else gateway.models[0]
        return gateway.router.route(name).tier.context_window  # 404 for an unknown model

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        body = await _json(request)
        if "messages" in body:
            chat: TokenizeChat = _parse(TokenizeChat, body)
            limit = window(chat.model)
            tools = [tool_dict(s.name, s.description, s.parameters)
                     for s in (ToolSpec.from_wire(t) for t in chat.tools or [])]
            last_open = chat.continue_final_message and not chat.add_generation_prompt
            ids = vocab.chat_ids(chat.messages, tools, chat.add_generation_prompt)
            if last_open and ids:  # the final message stays open: no end token
                ids = ids[:-1]
            strs = chat.return_token_strs
        else:
            plain: TokenizeCompletion = _parse(TokenizeCompletion, body)
            limit = window(plain.model)
            ids = vocab.encode(plain.prompt)
            strs = plain.return_token_strs
        out: dict[str, Any] = {"count": len(ids), "max_model_len": limit, "tokens": ids,
                               "token_strs": vocab.pieces(ids) if strs else None}
        return json_response(out)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        req: Detokenize = _parse(Detokenize, await _json(request))
        window(req.model)
        try:
            text = vocab.decode(req.tokens)
        except KeyError as exc:
            raise bad_request(f"tokens: token id {exc.args[0]} is out of vocabulary.",
                              param="tokens") from None
        return json_response({"prompt": text})

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        caches = [s.cache for _, _, s in engine.replica_states() if s.cache is not None]
        busy = sum(c.pinned for c in caches)
        if busy:
            raise bad_request(f"Failed to reset the prefix cache: {busy} tokens of KV are "
                              "still held by running requests.")
        for c in caches:
            c.clear()
        return Response(status_code=200)

    sleep: SleepState = engine.sleep

    @app.post("/sleep")
    async def sleep_route(request: Request) -> Response:
        raw = request.query_params.get("level", "1")
        if raw not in {str(n) for n in LEVELS}:
            raise bad_request(f"level: must be one of {', '.join(map(str, LEVELS))}, "
                              f"got {raw!r}.", param="level")
        if not sleep.asleep:
            for _, _, s in engine.replica_states():
                if s.cache is not None:
                    s.cache.drop_unpinned()  # the KV cache is discarded
        sleep.level = int(raw)
        return Response(status_code=200)

    @app.post("/wake_up")
    async def wake_up() -> Response:
        seconds = 0.0
        if sleep.asleep:
            seconds = max((wake_seconds(d.placement.weight_bytes_per_chip,
                                        d.placement.hardware.name)
                           for d in gateway.spec.deployments.values()), default=0.0)
            await asyncio.sleep(seconds)
            sleep.level = 0
        return Response(status_code=200, headers={"x-fastmode-wake-seconds": f"{seconds:.6f}"})

    @app.get("/is_sleeping")
    async def is_sleeping() -> Response:
        return json_response({"is_sleeping": sleep.asleep})

    lora_api.add_routes(app, gateway)  # /v1/load_lora_adapter, /v1/unload_lora_adapter
    render_api.add_routes(app, gateway)  # /v1/chat/completions/render, /v1/completions/render
