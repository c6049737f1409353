"""Ground truth per request: when the server got a request and when it sent each event.

Load generators measure a server from outside; fastmode knows from inside when each byte left,
so it can be the reference they are checked against (``fastmode verify``, docs/verify.md). A
traced request keeps, in the event loop's clock (the clock the engine's modeled times are in):

* ``arrival`` — the request's body was read (HTTP) or its ``response.create`` frame (websocket);
* for each event written: its modeled due time (the engine's time of the event's last token;
  ``None`` for events with no tokens: the opening, the closing), the time the write was handed to
  the transport (the loop clock when the turn's task yields the event to its writer, or when the
  engine's step writes it in push mode), and its token count;
* ``first byte`` and ``last byte`` — the first and the last event handed to the transport.

Times are ``time.monotonic()``: the clock of the event loop and of the engine's modeled times
(uvloop's ``loop.time()`` reads the same clock cut to whole milliseconds, too coarse for the gaps
between events of a fast tier). The cost is one ``is not None`` per event when a request is not traced and one list append per
*event* (never per token) when it is. Tracing is opt-in per request (``x-fastmode-trace: 1``) or
for every request (``fastmode serve --trace``); finished traces go to a bounded ring (the last
``server.trace_keep``) and, optionally, to a JSONL file (``--trace-file``). ``GET
/v1/fastmode/traces`` serves the ring as JSONL, each record visible only to the key that made it
(``gateway.stored.ownership``), like any stored object.

A request the gateway refused (any error answer before its first byte: a 400 naming a field, a
404 unknown model, a 413, a 429) is traced too (``rejected``): its record has the status, the
error as the client got it (type, code, param, message) and no events. With
``x-fastmode-trace: body`` or ``fastmode serve --trace-bodies`` a trace also keeps the request's
body and headers, redacted and bounded (``gateway.observe.trace_bodies``); the raw body is only
referenced while the request runs and turned into that capture once, when the trace is kept.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from fastmode.gateway.observe.exchange_format import Redactor
from fastmode.gateway.observe.trace_bodies import BodyBounds, capture, headers, parsed
from fastmode.gateway.stored.ownership import Caller

log = logging.getLogger("fastmode.tracing")

TRACE_HEADER = "x-fastmode-trace"
# the id each protocol's body carries, from the server's request id (the encoders' rule)
RESPONSE_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_",
                   "messages": "msg_"}
CLIENT_ID_HEADERS = ("x-request-id", "x-client-request-id")
_ON = frozenset({"1", "true", "yes", "on"})
BODY = "body"  # x-fastmode-trace: body — traced, with the request's body and headers
_TRACED = _ON | {BODY}


def _same(t: float) -> float:
    return t


@dataclass(slots=True)
class Trace:
    """One request's timeline, in the engine's modeled seconds (monotonic seconds at
    ``server.time_scale = 1``; ``epoch`` converts them to Unix time)."""

    request_id: str  # the server's id of the request (``x-request-id`` it answers with)
    client_request_id: str | None  # the id the client sent (x-request-id / x-client-request-id)
    protocol: str
    transport: str
    arrival: float
    epoch: float  # Unix time minus modeled time when the trace began
    owner: str | None = None  # the key id that made it (None: auth off)
    response_id: str | None = None  # the id in the body (chatcmpl-…, resp_…, msg_…)
    model: str = ""
    role: str = ""
    tier: str = ""
    status: int = 0
    # (due or None, handed to the transport, tokens) per event, in the order written
    events: list[tuple[float | None, float, int]] = field(default_factory=list)
    prompt_tokens: int = 0
    seq: int = 0  # the ring's order, set when the trace is kept
    user_agent: str | None = None
    # a refused request: {type, code, param, message} as the client got it (None: answered)
    error: dict[str, Any] | None = None
    with_body: bool = False  # keep the body and headers (x-fastmode-trace: body, --trace-bodies)
    sent: Any = None  # the raw body (a reference, not a copy) until the trace is kept
    request_headers: Mapping[str, str] | None = None
    body: Any = None  # the capture of ``sent`` (``gateway.observe.trace_bodies``)
    headers: dict[str, str] | None = None

    # a ``time.monotonic()`` reading as a modeled time (the engine's ``server.time_scale``)
    to_model: Callable[[float], float] = _same

    def event(self, due: float | None, sent: float, tokens: int) -> None:
        self.events.append((due, self.to_model(sent), tokens))

    def admitted(self, job: Any) -> None:
        """What admission decided: the ids the client sees, the model, role and tier."""
        self.request_id = job.id
        prefix = RESPONSE_PREFIX.get(self.protocol)
        self.response_id = job.id.replace("req-", prefix) if prefix else job.id
        self.model, self.role, self.tier = job.model, job.role.name, job.tier.name
        self.prompt_tokens = job.prompt_tokens
        self.owner = job.principal.id if job.principal is not None else None

    def whole(self, job: Any, sent: float) -> None:
        """A non-streamed answer: one write of every token (due: the last token's time)."""
        n = job.stream.delivered
        self.event(job.stream.last_at if n else None, sent, n)

    def record(self) -> dict[str, Any]:
        """The JSONL record: Unix seconds, and the derived figures a tool's metrics are
        compared with (TTFT from the first event that carries tokens, not the role chunk)."""
        e = self.epoch
        events = self.events
        tokens = [ev for ev in events if ev[2]]
        first_byte = events[0][1] if events else None
        last_byte = events[-1][1] if events else None
        first_token = tokens[0][1] if tokens else None
        last_token = tokens[-1][1] if tokens else None
        out = sum(ev[2] for ev in tokens)
        return {
            "seq": self.seq,
            "request_id": self.request_id,
            "client_request_id": self.client_request_id,
            "response_id": self.response_id,
            "protocol": self.protocol,
            "transport": self.transport,
            "model": self.model,
            "role": self.role,
            "tier": self.tier,
            "status": self.status,
            "arrival": self.arrival + e,
            "first_byte": None if first_byte is None else first_byte + e,
            "first_token": None if first_token is None else first_token + e,
            "last_token": None if last_token is None else last_token + e,
            "last_byte": None if last_byte is None else last_byte + e,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": out,
            "token_events": len(tokens),
            "events": [{"due": None if d is None else d + e, "sent": s + e, "tokens": n}
                       for d, s, n in events],
            "user_agent": self.user_agent,
            "error": self.error,
            "headers": self.headers,
            "body": self.body,
        }


class Traces:
    """The ring of finished traces (and the optional JSONL file they are appended to)."""

    def __init__(self, trace_all: bool = False, keep: int = 1000, path: str = "",
                 bodies: bool = False, bounds: BodyBounds | None = None,
                 redactor: Redactor | None = None) -> None:
        self.trace_all = trace_all
        self.ring: deque[Trace] = deque(maxlen=max(1, keep))
        self.path = path
        self.bodies = bodies  # every traced request keeps its body (--trace-bodies)
        self.bounds = bounds or BodyBounds(2000, 65536)
        self.redactor = redactor or Redactor([])
        self._seq = itertools.count(1)
        self.to_model: Callable[[float], float] = _same  # the engine's clock, once it runs

    def begin(self, headers: Mapping[str, str], request_id: str, protocol: str,
              transport: str, arrival: float | None = None) -> Trace | None:
        """A trace for this request if it is traced (``--trace`` or its header), else None:
        the per-request cost of tracing off is this one header look-up."""
        asked = headers.get(TRACE_HEADER)
        if not self.trace_all and (asked is None or asked.lower() not in _TRACED):
            return None
        now = time.monotonic()
        client = next((v for h in CLIENT_ID_HEADERS if (v := headers.get(h))), None)
        to_model = self.to_model
        trace = Trace(request_id, client, protocol, transport,
                      to_model(now if arrival is None else arrival), time.time() - to_model(now),
                      to_model=to_model, user_agent=headers.get("user-agent"))
        if self.bodies or (asked is not None and asked.lower() == BODY):
            trace.with_body, trace.request_headers = True, headers
        return trace

    def rejected(self, headers: Mapping[str, str], request_id: str, protocol: str,
                 transport: str, status: int, error: dict[str, Any], *, owner: str | None,
                 sent: Any = None, model: str = "", arrival: float | None = None) -> None:
        """A refused request's trace (if the request is traced): its status and ``error`` (as
        the client got it), the model it asked for (``model``, or the body's), no events."""
        trace = self.begin(headers, request_id, protocol, transport, arrival)
        if trace is None:
            return
        trace.status, trace.error, trace.owner, trace.sent = status, error, owner, sent
        if not model and sent is not None:  # the model as sent, if the body says one
            body = parsed(sent)
            found = body.get("model") if isinstance(body, dict) else None
            model = found if isinstance(found, str) else ""
        trace.model = model
        self.keep(trace)

    def keep(self, trace: Trace) -> None:
        """A finished trace: into the ring (the oldest drops out) and the file; once."""
        if trace.seq:
            return
        trace.seq = next(self._seq)
        if trace.with_body:  # the body's capture, once (the raw body is dropped either way)
            chars = self.bounds.string_chars
            if trace.sent is not None:
                trace.body = capture(trace.sent, trace.protocol, self.redactor, self.bounds)
            if trace.request_headers is not None:
                trace.headers = headers(trace.request_headers, self.redactor, chars)
        trace.sent = trace.request_headers = None
        self.ring.append(trace)
        if self.path:
            try:
                with open(self.path, "ab") as f:
                    f.write(orjson.dumps(trace.record()) + b"\n")
            except OSError:
                log.exception("cannot append to the trace file %s", self.path)

    def since(self, seq: int, caller: Caller) -> Iterator[Trace]:
        """The kept traces after ``seq`` that ``caller`` may see, oldest first."""
        for trace in list(self.ring):
            if trace.seq > seq and caller.may_see(trace.owner):
                yield trace
