"""An async client for fastmode and any OpenAI-compatible server, over HTTP or one websocket.

Only the public wire formats are used (httpx, websockets, orjson; nothing from ``fastmode/gateway/`` or
``fastmode/backends/``); ``clients.event_parsers`` turns what arrives into ``clients.events``::

    async with Client("http://127.0.0.1:8000/v1", transport="ws") as client:
        stream = client.stream("Hello", model="frontier-spark", max_tokens=100)
        async for event in stream:          # TextDelta, ToolCallDelta, Usage, Error, Done
            ...
        print(stream.summary.line())        # TTFT, tokens/s, tokens, cost, tier

Transports and APIs:

* ``transport="http", api="chat"`` (default): ``POST /chat/completions`` with SSE;
* ``transport="http", api="responses"``: ``POST /responses`` with SSE;
* ``transport="ws"``: the Responses API WebSocket mode (``/responses`` upgraded), one socket
  for every turn, turns one at a time; ``previous_response_id`` continues a conversation.

``keepalive=False`` makes every HTTP request open a fresh connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import httpx
import orjson
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from fastmode.clients.event_parsers import ChatParser, ResponsesParser, http_error_event
from fastmode.clients.events import Error, Event, Summary

DEFAULT_URL = "http://127.0.0.1:8000"
# fastmode's tiers as (path prefix, model): where `--tier` sends a request
TIERS: dict[str, tuple[str, str]] = {
    "standard": ("/v1", "frontier"),
    "fast": ("/fast/v1", "frontier"),
    "spark": ("/v1", "frontier-spark"),
}
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
ABANDON_TIMEOUT_S = 5.0

Transport = Literal["http", "ws"]
Api = Literal["chat", "responses"]


def tier_url(base: str, tier: str) -> tuple[str, str]:
    """(base URL with its API prefix, model) of a fastmode tier on server ``base``."""
    prefix, model = TIERS[tier]
    return base.rstrip("/") + prefix, model


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition in Chat Completions form (accepts the Responses form too)."""
    if "function" in tool:
        return tool
    fn = {k: v for k, v in tool.items() if k != "type"}
    return {"type": "function", "function": fn}


def responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition in Responses form (accepts the Chat Completions form too)."""
    if "function" in tool:
        return {"type": "function", **tool["function"]}
    return tool


class Stream:
    """The events of one turn; ``summary`` fills in as they are read."""

    def __init__(self, events: AsyncIterator[Event], summary: Summary) -> None:
        self._events = events
        self.summary = summary

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Event:
        event = await self._events.__anext__()
        self.summary.feed(event)
        return event

    async def aclose(self) -> None:
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def collect(self) -> Summary:
        """Read the turn to its end; returns the summary."""
        async with self:
            async for _ in self:
                pass
        return self.summary


class Client:
    def __init__(
        self,
        base_url: str = DEFAULT_URL + "/v1",
        *,
        api_key: str | None = None,
        transport: Transport = "http",
        api: Api | None = None,
        keepalive: bool = True,
        timeout: float = 120.0,
    ) -> None:
        if transport not in ("http", "ws"):
            raise ValueError(f"transport: expected 'http' or 'ws', got {transport!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.transport: Transport = transport
        self.api: Api = "responses" if transport == "ws" else (api or "chat")
        self.keepalive = keepalive
        self.timeout = timeout
        self._http: httpx.AsyncClient | None = None
        self._ws: ClientConnection | None = None
        self._turn_lock = asyncio.Lock()

    @property
    def ws_url(self) -> str:
        scheme, sep, rest = self.base_url.partition("://")
        return {"http": "ws", "https": "wss"}.get(scheme, scheme) + sep + rest + "/responses"

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._ws is not None:
            ws, self._ws = self._ws, None
            await ws.close()
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def connect(self) -> float:
        """Open the websocket now (a warm socket for the first turn); returns seconds taken."""
        if self.transport != "ws" or self._ws is not None:
            return 0.0
        started = time.perf_counter()
        self._ws = await websockets.connect(
            self.ws_url, additional_headers=self._headers(), compression=None,
            max_size=MAX_MESSAGE_BYTES, open_timeout=self.timeout,
        )
        return time.perf_counter() - started

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            limits = httpx.Limits(max_keepalive_connections=20 if self.keepalive else 0)
            self._http = httpx.AsyncClient(timeout=self.timeout, limits=limits,
                                           headers=self._headers())
        return self._http

    # -- turns ----------------------------------------------------------------------------

    def stream(
        self,
        input: str | Sequence[dict[str, Any]],
        *,
        model: str,
        max_tokens: int | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        previous_response_id: str | None = None,
        instructions: str | None = None,
        seed: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Stream:
        """Start a turn. ``input`` is a prompt, chat messages (chat API) or Responses input
        items; tools may be given in either API's form."""
        if self.api == "chat":
            if previous_response_id:
                raise ValueError("previous_response_id needs the Responses API")
            messages = [{"role": "user", "content": input}] if isinstance(input, str) \
                else list(input)
            if instructions:
                messages.insert(0, {"role": "system", "content": instructions})
            body: dict[str, Any] = {"model": model, "messages": messages, "stream": True,
                                    "stream_options": {"include_usage": True}}
            if max_tokens is not None:
                body["max_completion_tokens"] = max_tokens
            if tools:
                body["tools"] = [chat_tool(t) for t in tools]
        else:
            body = {"model": model, "input": input if isinstance(input, str) else list(input)}
            if self.transport == "http":
                body["stream"] = True
            if max_tokens is not None:
                body["max_output_tokens"] = max_tokens
            if tools:
                body["tools"] = [responses_tool(t) for t in tools]
            if previous_response_id:
                body["previous_response_id"] = previous_response_id
            if instructions:
                body["instructions"] = instructions
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if seed is not None:
            body["seed"] = seed
        body.update(extra or {})
        summary = Summary(transport=f"{self.transport}/{self.api}", model=model,
                          started=time.perf_counter())
        events = self._ws_turn(body, summary) if self.transport == "ws" \
            else self._http_turn(body, summary)
        return Stream(events, summary)

    async def complete(self, input: str | Sequence[dict[str, Any]], **kw: Any) -> Summary:
        """A whole turn; returns its summary (text, tool calls, usage, timings)."""
        return await self.stream(input, **kw).collect()

    async def _http_turn(self, body: dict[str, Any], summary: Summary) -> AsyncIterator[Event]:
        chat = self.api == "chat"
        url = self.base_url + ("/chat/completions" if chat else "/responses")
        client = self._client()
        summary.started = time.perf_counter()
        try:
            async with client.stream("POST", url, content=orjson.dumps(body),
                                     headers={"content-type": "application/json"}) as resp:
                summary.tier = resp.headers.get("x-fastmode-tier")
                if resp.status_code != 200:
                    raw = await resp.aread()
                    yield http_error_event(resp.status_code, raw, time.perf_counter())
                    return
                parser: ChatParser | ResponsesParser = ChatParser() if chat \
                    else ResponsesParser()
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    for event in parser.feed(orjson.loads(data), time.perf_counter()):
                        yield event
                if isinstance(parser, ChatParser):
                    yield parser.done(time.perf_counter())
        except httpx.HTTPError as exc:
            yield Error(f"cannot reach {url}: {type(exc).__name__}: {exc}",
                        time.perf_counter(), code="connection_error")

    async def _ws_turn(self, body: dict[str, Any], summary: Summary) -> AsyncIterator[Event]:
        async with self._turn_lock:
            try:
                summary.connect_s = await self.connect()
            except InvalidStatus as exc:
                res = exc.response
                yield http_error_event(res.status_code, res.body or b"", time.perf_counter())
                return
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                yield Error(f"cannot open {self.ws_url}: {exc}", time.perf_counter(),
                            code="connection_error")
                return
            ws = self._ws
            assert ws is not None
            parser = ResponsesParser()
            summary.started = time.perf_counter()
            try:
                await ws.send(orjson.dumps({"type": "response.create", **body}).decode())
                while not parser.finished:
                    raw = await ws.recv()
                    t = time.perf_counter()
                    obj = orjson.loads(raw)
                    if obj.get("type") == "error" and \
                            (obj.get("error") or {}).get("code") == "response_cancel_not_active":
                        continue  # the answer to an earlier turn's late cancel
                    for event in parser.feed(obj, t):
                        yield event
            except ConnectionClosed as exc:
                self._ws = None
                close = exc.rcvd
                why = f"{close.code} {close.reason}".strip() if close else "no close frame"
                yield Error(f"websocket closed: {why}", time.perf_counter(),
                            code="connection_closed")
            finally:
                if not parser.finished and self._ws is ws:
                    await self._abandon(ws, parser)

    async def _abandon(self, ws: ClientConnection, parser: ResponsesParser) -> None:
        """The caller stopped reading mid-turn: cancel the response and skip its events."""
        try:
            async with asyncio.timeout(ABANDON_TIMEOUT_S):
                await ws.send('{"type":"response.cancel"}')
                while not parser.finished:
                    parser.feed(orjson.loads(await ws.recv()), 0.0)
        except (TimeoutError, ConnectionClosed, orjson.JSONDecodeError):
            self._ws = None
            await ws.close()

