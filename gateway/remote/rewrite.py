"""Reading and rewriting an upstream's answer: usage, ``time_info``, errors, the SSE stream.

The stream passes through as bytes, cut only at event boundaries, never re-encoded; only the
closing events (usage, ``[DONE]``) are parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from backends.engine import Tier

from ..errors import ERROR_TYPES, APIError
from ..metrics import Metrics
from .pool import Upstream

DONE = b"data: [DONE]"
_PASS_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")


@dataclass(eq=False)
class Call:
    """One proxied request, from admission to settlement."""

    id: str
    tier: Tier
    requested_tier: str
    prompt_tokens: int
    started: float
    include_usage: bool
    upstream: Upstream | None = None
    response: Any = None  # remote.http.Response once an upstream answered
    chunks: Any = None  # the response's raw byte iterator, once the first bytes are read
    attempts: int = 0
    usage: dict[str, Any] | None = None
    time_info: dict[str, Any] | None = None
    events: int = 0  # SSE data events forwarded (for billing a stream cut short)
    first_byte: float | None = None
    settled: bool = False
    cost_usd: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def cost(self, usage: dict[str, Any]) -> float:
        prompt, cached, output = _usage_counts(usage)
        return self.tier.prices.cost(prompt, cached, output)


def _usage_counts(usage: dict[str, Any]) -> tuple[int, int, int]:
    details = usage.get("prompt_tokens_details") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return prompt, min(cached, prompt), int(usage.get("completion_tokens") or 0)


def upstream_error(status: int, body: bytes, headers: Mapping[str, str] | None = None
                   ) -> APIError:
    """An upstream's error answer in the OpenAI format (OpenAI's, vLLM's and FastAPI's shapes)."""
    message = etype = code = param = None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, str):
            message = err
        else:
            src = err if isinstance(err, dict) else obj  # vLLM: {"object":"error","message",...}
            message, etype = src.get("message"), src.get("type")
            code, param = src.get("code"), src.get("param")
        if message is None and "detail" in obj:
            message = str(obj["detail"])
    if not message:
        text = body.decode("utf-8", "replace").strip()[:500]
        message = f"The upstream server answered HTTP {status}" + (f": {text}" if text else ".")
    if code is not None and not isinstance(code, str):
        code = None if isinstance(code, int) else str(code)  # vLLM repeats the status as code
    if status >= 500 and not str(message).startswith("Upstream"):
        message = f"Upstream error: {message}"
    if etype not in set(ERROR_TYPES.values()) | {"tokens", "requests", "server_error"}:
        etype = None
    passed = {k: v for k in _PASS_HEADERS if headers is not None and (v := headers.get(k))}
    return APIError(status, str(message), param=param if isinstance(param, str) else None,
                    code=code, type=etype or ERROR_TYPES.get(status, "server_error"),
                    headers=passed)


def _error_event(message: str, code: str) -> bytes:
    return b"data: " + orjson.dumps(
        {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    ) + b"\n\n"


class Tap:
    """Follows an upstream SSE byte stream and returns the bytes to forward, cut at event
    boundaries. Reads the usage chunk (strips it when the client did not ask for usage, or puts
    the gateway's cost in it), the ``time_info`` of the last chunk, and ``[DONE]``. Per chunk it
    costs a few byte searches; only the closing events are parsed."""

    __slots__ = ("call", "buf", "strip", "done", "replace", "first")

    def __init__(self, call: Call, label: str) -> None:
        self.call = call
        self.buf = b""
        self.strip = not call.include_usage
        self.done = False
        self.first = label  # the service_tier label to show; learned against the first event
        self.replace: tuple[bytes, bytes] | None = None

    def feed(self, chunk: bytes) -> bytes:
        if self.buf:
            chunk = self.buf + chunk
        cut = chunk.rfind(b"\n\n")
        if cut < 0:
            self.buf = chunk
            return b""
        cut += 2
        out, self.buf = chunk[:cut], chunk[cut:]
        if self.first:
            self._learn(out)
        if self.strip:
            out = out.replace(b',"usage":null', b"")
        if self.replace is not None:
            out = out.replace(*self.replace)
        if (b'"usage":{' in out or b'"usage": {' in out or b'"time_info"' in out
                or DONE in out):
            out = self._inspect(out)
        self.call.events += out.count(b"data: {")
        return out

    def _learn(self, out: bytes) -> None:
        """Show the gateway's service_tier label if the upstream uses another one."""
        label, self.first = self.first, ""
        event = out.split(b"\n\n", 1)[0]
        if not event.startswith(b"data: {"):
            return
        try:
            theirs = orjson.loads(event[6:]).get("service_tier")
        except orjson.JSONDecodeError:
            return
        if isinstance(theirs, str) and theirs != label:
            self.replace = (b'"service_tier":' + orjson.dumps(theirs),
                            b'"service_tier":' + orjson.dumps(label))

    def _inspect(self, out: bytes) -> bytes:
        kept = []
        for event in out.split(b"\n\n")[:-1]:
            body = event[6:] if event.startswith(b"data: ") else event[5:].lstrip()
            if event.startswith(DONE):
                self.done = True
            elif (b'"usage"' in event or b'"time_info"' in event) and body.startswith(b"{"):
                try:
                    obj = orjson.loads(body)
                except orjson.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict):
                    if isinstance(obj.get("time_info"), dict):
                        self.call.time_info = obj["time_info"]
                    usage = obj.get("usage")
                    if isinstance(usage, dict) and not obj.get("choices"):
                        self.call.usage = usage
                        if self.strip:
                            continue
                        obj["usage"] = {**usage, "cost_usd": self.call.cost(usage)}
                        event = b"data: " + orjson.dumps(obj)
            kept.append(event)
            kept.append(b"\n\n")
        return b"".join(kept)


def settle_call(call: Call, metrics: Metrics, status: int) -> None:
    """Count the call once in the gateway's metrics, at the gateway's prices."""
    if call.settled:
        return
    call.settled = True
    tier = call.tier.name
    if call.usage is not None:
        prompt, cached, output = _usage_counts(call.usage)
    elif call.events:  # cut short: the prompt, and the tokens that reached the client
        prompt, cached, output = call.prompt_tokens, 0, max(0, call.events - 1)
    else:
        metrics.record(tier, status)
        return
    call.cost_usd = call.tier.prices.cost(prompt, cached, output)
    ttft = itl = None
    ti = call.time_info
    if ti is not None:
        ttft = float(ti.get("queue_time", 0.0)) + float(ti.get("prompt_time", 0.0))
        if output > 1:
            itl = float(ti.get("completion_time", 0.0)) / (output - 1)
    elif call.first_byte is not None:
        ttft = call.first_byte - call.started
    if status != 200:
        metrics.cancelled.labels(tier).inc()
    metrics.record(tier, status, prompt=prompt, cached=cached, output=output,
                   cost=call.cost_usd, ttft=ttft, itl=itl)
