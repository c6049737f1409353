"""vLLM's runtime LoRA routes: ``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter``.

They exist only when the engine allows run-time updates (``[deployments.NAME.lora]
runtime_updating = true``, or ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` in the environment of
``fastmode engine``), as vLLM registers them only under that variable: otherwise both are 404.
Shapes are vLLM's: ``{"lora_name", "lora_path", "load_inplace"}`` (and fastmode's ``rank``:
vLLM reads it from the adapter's files, fastmode has none; default ``max_lora_rank``) and
``{"lora_name", "lora_int_id"}``; success is a 200 whose body is vLLM's sentence,
``Success: LoRA adapter 'NAME' added successfully.``; a refusal is vLLM's ``ErrorResponse``,
``{"error": {"message", "type", "param", "code": STATUS}}`` (400 ``InvalidUserInput`` for a
name loaded twice or a missing field, 404 ``NotFoundError`` for unloading an unknown one).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from fastmode.gateway.engines.lora_registry import LoraError
from fastmode.gateway.pipeline.admission import Gateway


class LoadLoRAAdapter(BaseModel):
    model_config = ConfigDict(extra="ignore")  # vLLM's is_3d_lora_weight, ... accepted

    lora_name: str = Field(max_length=256)
    lora_path: str = Field(max_length=4096)
    load_inplace: bool = False
    rank: int | None = Field(None, ge=1, le=512)  # fastmode's (vLLM reads adapter_config.json)


class UnloadLoRAAdapter(BaseModel):
    model_config = ConfigDict(extra="ignore")

    lora_name: str = Field(max_length=256)
    lora_int_id: int | None = None


def vllm_error(status: int, type_: str, message: str, param: str | None = None) -> Response:
    """vLLM's ``ErrorResponse`` (its ``code`` is the HTTP status)."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": status}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


async def _body(request: Request, model: type[BaseModel]) -> Any:
    try:
        raw = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        return vllm_error(400, "BadRequestError", f"The request body is not valid JSON: {exc}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        return vllm_error(400, "BadRequestError", f"{where}: {err.get('msg')}", where or None)


def add_routes(app: FastAPI, gateway: Gateway) -> None:
    loras = gateway.loras
    if not loras.runtime_updating:
        return

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Response:
        req = await _body(request, LoadLoRAAdapter)
        if isinstance(req, Response):
            return req
        try:
            loras.load(req.lora_name, req.lora_path, req.rank, inplace=req.load_inplace)
        except LoraError as exc:
            return vllm_error(exc.status, exc.type, exc.message)
        gateway.router.forget(req.lora_name)
        return Response(f"Success: LoRA adapter '{req.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> Response:
        req = await _body(request, UnloadLoRAAdapter)
        if isinstance(req, Response):
            return req
        try:
            deployment, adapter = loras.unload(req.lora_name)
        except LoraError as exc:
            return vllm_error(exc.status, exc.type, exc.message)
        gateway.router.forget(adapter.name)
        dep = gateway.deployments.get(deployment)
        for replica in dep.replicas if dep is not None else ():
            slots = replica.scheduler.lora
            if slots is not None:
                slots.forget(adapter.name)  # its GPU slot frees (once no request runs it)
        return Response(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")
