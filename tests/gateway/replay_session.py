"""A session recorded through a remote tier from a ``fastmode engine``, for the replay tests.

The engine (the standard deployment, its own app as ``fastmode engine`` runs it) and the
recording gateway (remote standard and fast tiers pointing at the engine, ``[record]``) run in
process on loopback ports; so do the replaying gateways. Every exchange is made with a raw HTTP
or websocket client, so what a test compares is the bytes a client received.
"""

from __future__ import annotations

import asyncio
import contextlib
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
from conftest import quick_config_text
from test_remote import serve
from websockets.asyncio.client import connect

from fastmode.backends.engine import build
from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config
from fastmode.gateway.engine_config import engine_config

USER = [{"role": "user", "content": "Tell me about the sea in two sentences."}]
WEATHER_CHAT = {"type": "function", "function": {
    "name": "get_weather", "description": "weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
WEATHER_ANTHROPIC = {"name": "get_weather", "description": "weather in a city",
                     "input_schema": WEATHER_CHAT["function"]["parameters"]}


def config(**tables: Any) -> Config:
    """The built-in config on quick hardware (tests/conftest.py), with extra tables."""
    raw = tomllib.loads(quick_config_text())
    raw.update(tables)
    return Config.model_validate(raw)


def steady(**tables: Any) -> Config:
    """``config`` with each tier's other tenants as a constant background load from the first
    step (as ``fastmode engine`` models them), not Poisson arrivals that ramp up after start:
    a request's modeled pace is then its tier's operating point, whenever it comes."""
    raw = tomllib.loads(quick_config_text())
    raw.update(tables)
    spec = build(Config.model_validate(raw).sim())
    for name, dep in raw["deployments"].items():
        demand = spec.deployments[name].tenants
        if demand is not None:
            bg = demand.background
            dep["background"] = {"occupancy": bg.seqs / dep["max_batch"],
                                 "context_tokens": bg.context_tokens,
                                 "prefill_tokens_per_step": bg.prefill_tokens_per_step}
    for tier in raw["tiers"].values():
        tier.pop("tenants", None)
    return Config.model_validate(raw)


@contextlib.asynccontextmanager
async def recording(directory: Path, **record: Any) -> AsyncIterator[str]:
    """A fastmode engine, and a gateway recording into ``directory`` whose standard and fast
    tiers are served by it; yields the gateway's base URL."""
    async with serve(create_app(engine_config(config(), "standard"))) as engine:
        remote = {"health_interval_s": 0.2,
                  "tiers": {"standard": {"upstreams": [engine]}, "fast": {"upstreams": [engine]}}}
        app = create_app(config(remote=remote, **({"record": {"dir": str(directory), **record}} if directory else {})))
        async with serve(app, ws="websockets-sansio") as url:
            yield url


@contextlib.asynccontextmanager
async def recording_locally(directory: Path, **tables: Any) -> AsyncIterator[str]:
    """A gateway recording its own in-process tiers (record works on any tier): quicker, for
    the tests of matching and redaction; yields its base URL."""
    record = {"dir": str(directory), **tables.pop("record", {})}
    async with serve(create_app(config(record=record, **tables)),
                     ws="websockets-sansio") as url:
        yield url


@contextlib.asynccontextmanager
async def replaying(directory: Path, tables: dict[str, Any] | None = None,
                    **replay: Any) -> AsyncIterator[tuple[str, Any]]:
    """A gateway replaying ``directory`` (no upstream at all), its tiers at their steady
    operating points, with other config ``tables``; yields (base URL, app)."""
    app = create_app(steady(replay={"dir": str(directory), **replay}, **(tables or {})))
    async with serve(app, ws="websockets-sansio") as url:
        yield url, app


async def post(url: str, path: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=20) as c:
        return await c.post(path, json=body, headers=headers or {})


async def websocket(url: str, creates: list[dict[str, Any]]) -> list[str]:
    """Every frame received for each ``response.create`` in turn on one connection (a later
    one may name the previous response: ``previous_response_id: "$prev"``)."""
    frames: list[str] = []
    prev = None
    async with connect(url.replace("http://", "ws://") + "/v1/responses") as ws:
        for create in creates:
            if create.get("previous_response_id") == "$prev":
                create = {**create, "previous_response_id": prev}
            await ws.send(orjson.dumps({"type": "response.create", **create}).decode())
            while True:
                text = str(await asyncio.wait_for(ws.recv(), 10))
                frames.append(text)
                event = orjson.loads(text)
                if event["type"] in ("response.completed", "response.incomplete",
                                     "response.failed", "error"):
                    prev = (event.get("response") or {}).get("id")
                    break
    return frames


def sse_data(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in raw.split(b"\n")
            if line.startswith(b"data: {")]


Exchange = Callable[[str], Awaitable[Any]]
CHAT_STREAM = {"model": "frontier", "messages": USER, "max_tokens": 24, "stream": True,
               "stream_options": {"include_usage": True}}


async def _continued(url: str) -> bytes:
    first = await post(url, "/v1/responses", {"model": "frontier", "input": "Name a colour.",
                                              "max_output_tokens": 16, "stream": True})
    rid = sse_data(first.content)[0]["response"]["id"]
    second = await post(url, "/v1/responses", {"model": "frontier", "input": "And another?",
                                               "previous_response_id": rid, "stream": True,
                                               "max_output_tokens": 16})
    return first.content + second.content


def _body(path: str, body: dict[str, Any], fast: bool = False) -> Exchange:
    async def run(url: str) -> bytes:
        r = await post(url, ("/fast" if fast else "") + path, body)
        assert r.status_code == 200, r.text
        return r.content
    return run


SESSION: dict[str, Exchange] = {
    "chat": _body("/v1/chat/completions", {"model": "frontier", "messages": USER,
                                           "max_tokens": 24}),
    "chat-stream": _body("/v1/chat/completions", CHAT_STREAM),
    "chat-tools-stream": _body("/v1/chat/completions", {
        "model": "frontier", "messages": [{"role": "user", "content": "Weather in Lyon?"}],
        "tools": [WEATHER_CHAT], "tool_choice": "required", "stream": True}),
    "chat-fast-stream": _body("/v1/chat/completions", {
        "model": "frontier", "messages": USER, "max_tokens": 24, "stream": True}, fast=True),
    "completions": _body("/v1/completions", {"model": "frontier", "prompt": "The sea is",
                                             "max_tokens": 12}),
    "completions-stream": _body("/v1/completions", {"model": "frontier", "prompt": "The sea",
                                                    "max_tokens": 12, "stream": True}),
    "completions-echo": _body("/v1/completions", {"model": "frontier", "prompt": "Waves",
                                                  "max_tokens": 8, "echo": True}),
    "responses": _body("/v1/responses", {"model": "frontier", "input": USER,
                                         "max_output_tokens": 24}),
    "responses-stream": _body("/v1/responses", {"model": "frontier", "input": "Hello there",
                                                "max_output_tokens": 24, "stream": True}),
    "responses-continued": _continued,
    "responses-websocket": lambda url: websocket(url, [
        {"model": "frontier", "input": "Say hi.", "max_output_tokens": 16},
        {"model": "frontier", "input": "Once more.", "previous_response_id": "$prev",
         "max_output_tokens": 16}]),
    "messages": _body("/v1/messages", {"model": "frontier", "max_tokens": 24,
                                       "messages": USER}),
    "messages-stream": _body("/v1/messages", {"model": "frontier", "max_tokens": 24,
                                              "messages": USER, "stream": True}),
    "messages-tools-stream": _body("/v1/messages", {
        "model": "frontier", "max_tokens": 64, "stream": True, "tools": [WEATHER_ANTHROPIC],
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "Weather in Lyon?"}]}),
}


async def run_session(url: str) -> dict[str, Any]:
    """Every exchange of the session; what the client received, by name."""
    return {name: await exchange(url) for name, exchange in SESSION.items()}
