"""vLLM's render routes: a request's prompt as the engine would run it, without running it.

``POST /v1/chat/completions/render`` takes a Chat Completions body and answers one vLLM
``GenerateRequest``; ``POST /v1/completions/render`` takes a Completions body and answers a list
of them, one per prompt. Each is ``{"request_id", "token_ids", "features", "sampling_params",
"model", "stream", "stream_options", "cache_salt", "priority", "kv_transfer_params"}``: what a
router that tokenizes outside the engine (llm-d's, the Inference Extension's precise prefix
scorer) sends to ``/inference/v1/generate`` or hashes into blocks. ``token_ids`` are the ids the
engine hashes into its prefix-cache blocks for the same request (``block_keys.prompt_ids``: the
same as ``/tokenize`` gives, fitted to the billed count), so a router's block hashes match the
engine's KV events. ``features`` is null (fastmode renders no multimodal features);
``sampling_params`` carries the fields fastmode reads (``max_tokens`` as the engine caps it,
``temperature``, ``top_p``, ``seed``, ``stop``, ``ignore_eos``, ``n``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from fastmode.gateway.engines.block_keys import prompt_ids
from fastmode.gateway.errors import bad_request
from fastmode.gateway.http.json_body import parse_json
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.protocols import ENDPOINTS
from fastmode.gateway.protocols.base import RequestContext
from fastmode.gateway.values.ids import new_id
from fastmode.gateway.values.request import TurnRequest

MAX_PROMPTS = 64  # prompts one Completions render may carry


def add_routes(app: FastAPI, gateway: Gateway) -> None:
    vocab = gateway.engine.vocabulary

    def rendered(req: Any, turn: TurnRequest) -> dict[str, Any]:
        tier = gateway.router.route(turn.model).tier  # 404 for an unknown model
        cap = gateway.router.max_output(tier, turn.prompt_tokens, turn.max_tokens)
        adapter = gateway.loras.get(turn.model)
        g = turn.generation
        return {
            "request_id": new_id("render"),
            "token_ids": prompt_ids(vocab, turn),
            "features": None,
            "sampling_params": {"n": 1, "max_tokens": cap, "temperature": g.temperature,
                                "top_p": getattr(req, "top_p", None), "seed": g.seed,
                                "stop": list(g.stop), "ignore_eos": g.ignore_eos},
            "model": adapter.name if adapter is not None else turn.model,
            "stream": turn.stream,
            "stream_options": None,
            "cache_salt": None,
            "priority": 0,
            "kv_transfer_params": turn.kv_transfer,
        }

    def context(request: Request) -> RequestContext:
        headers = {k.lower(): v for k, v in request.headers.items()}
        return RequestContext(headers, False, app.state.responses)

    @app.post("/v1/chat/completions/render")
    async def render_chat(request: Request) -> Response:
        protocol = ENDPOINTS["/chat/completions"]
        req = protocol.validate(parse_json(await request.body()))
        return json_response(rendered(req, protocol.translate(req, context(request))))

    @app.post("/v1/completions/render")
    async def render_completions(request: Request) -> Response:
        protocol = ENDPOINTS["/completions"]
        body = parse_json(await request.body())
        prompt = body.get("prompt")
        prompts: list[Any] = [prompt]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompts = prompt
        if len(prompts) > MAX_PROMPTS:
            raise bad_request(f"prompt: at most {MAX_PROMPTS} prompts per render.",
                              param="prompt")
        out = []
        for one in prompts:  # one GenerateRequest per prompt, as vLLM answers
            req = protocol.validate({**body, "prompt": one})
            out.append(rendered(req, protocol.translate(req, context(request))))
        return json_response(out)
