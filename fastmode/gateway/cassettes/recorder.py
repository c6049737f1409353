"""Recording: every exchange a client had with the gateway, written as a cassette entry.

What is recorded is what the gateway sent its client — the protocol's own events (or body),
each with its time after the request — not the upstream hop. That is the level where a replay
can be byte-identical per protocol and transport: the upstream hop is always Chat Completions
(``gateway.remote``), and the client's bytes are that answer as rendered by the gateway (its
ids, usage, prices, the Responses and Messages event sequences). The events are taken as
``Frames`` (event name, JSON body) before the transport frames them, so one recording serves the
same protocol over SSE and, for the Responses API, over the websocket.

A turn is recorded when it was admitted and ran to its end: completed, or ended by the
upstream's failure (its error event is recorded: replaying a provider's failure is worth as
much as replaying its success). Turns with an injected fault, cancelled by their client, cut
for a slow reader or by a shutdown are not: they are the gateway's doing, not the upstream's.

Each process appends to its own file (``<start time>-<pid>.jsonl``), created at the first
exchange, one line per exchange written when the exchange ends, before its last event (or its
body) is sent: a client that saw the end finds the line. Worker processes never interleave
lines, and an interrupted gateway leaves whole lines only.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from fastmode.gateway.cassette_config import RecordConfig, secret_header
from fastmode.gateway.cassettes.library import Wire
from fastmode.gateway.observe.exchange_format import VERSION, Redactor, dumps, event_item
from fastmode.gateway.protocols.events import Frames
from fastmode.gateway.state import COMPLETED, FAILED
from fastmode.gateway.values.job import Job


class Recorder:
    def __init__(self, config: RecordConfig, redactor: Redactor) -> None:
        self.dir = Path(config.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.keep = [h for h in config.headers if not secret_header(h)]
        self.redactor = redactor
        self.path = self.dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.jsonl"
        self.written = 0

    def tape(self, wire: Wire, job: Job, transport: str,
             framed: Callable[[Frames], bytes]) -> Tape:
        head = {
            "version": VERSION, "id": job.id, "protocol": wire.protocol, "fast": wire.fast,
            "stream": wire.stream,
            "transport": transport if transport == "websocket" else
            ("sse" if wire.stream else "http"),
            "request": wire.body,
            "headers": {h: wire.headers[h] for h in self.keep if h in wire.headers},
        }
        return Tape(self, head, wire.began, job, framed)

    def write(self, entry: dict[str, Any]) -> None:
        out = self.redactor.entry(entry)
        if out is None:
            return  # the redaction hook dropped it
        with self.path.open("ab") as f:  # one write per line, appended
            f.write(dumps(out))
        self.written += 1


def _about(job: Job) -> dict[str, Any]:
    """What the ``recorded`` field says: when, which tier, which upstream (no credentials)."""
    about: dict[str, Any] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": job.model, "tier": job.tier.name, "role": job.role.name,
    }
    upstream = job.headers.get("x-fastmode-upstream")
    if upstream:
        parts = urlsplit(upstream)
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        about["upstream"] = urlunsplit(parts._replace(netloc=netloc))
        rid = job.headers.get("x-fastmode-upstream-request-id")
        if rid:
            about["upstream_request_id"] = rid
    return about


class Tape:
    """One exchange being recorded: its events as they go to the client."""

    def __init__(self, recorder: Recorder, head: dict[str, Any], began: float, job: Job,
                 framed: Callable[[Frames], bytes]) -> None:
        self.recorder = recorder
        self.head = head
        self.began = began
        self.job = job
        self.framed = framed
        self.events: list[dict[str, Any]] = []

    def _take(self, frames: Frames, now: float) -> Frames:
        t = max(0.0, now - self.began)
        self.events += [event_item(t, kind, body) for kind, body in frames]
        return frames

    async def _tap(self, events: AsyncIterator[Frames],
                   out: Callable[[Frames], Any]) -> AsyncIterator[Any]:
        clock = asyncio.get_running_loop().time
        written = False
        try:
            async for frames in events:
                taken = self._take(frames, clock())
                if not written and self.job.ended in (COMPLETED, FAILED):
                    # settled: these are the last events. The line is written before they go,
                    # so a client that saw the stream's end finds its exchange in the cassette
                    written = True
                    self._end()
                yield out(taken)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        if not written:
            self._end()  # only when the stream ran to its end (not closed early)

    def sse(self, events: AsyncIterator[Frames]) -> AsyncIterator[bytes]:
        """The turn's events as SSE bytes, recorded on the way."""
        return self._tap(events, self.framed)

    def frames(self, events: AsyncIterator[Frames]) -> AsyncIterator[Frames]:
        """The turn's events as frames (the websocket), recorded on the way."""
        return self._tap(events, _same)

    def _end(self) -> None:
        if self.job.ended not in (COMPLETED, FAILED) or not self.events:
            return
        self.recorder.write({**self.head, "status": 200, "events": self.events,
                             "recorded": _about(self.job)})

    def whole(self, body: bytes, now: float) -> None:
        """A non-streamed answer's body, at its time."""
        if self.job.ended != COMPLETED:
            return
        item = event_item(max(0.0, now - self.began), "", body)
        if "data" not in item or not isinstance(item["data"], Mapping):
            return  # not a JSON object: nothing a client could replay
        self.recorder.write({**self.head, "status": 200, "t": item["t"], "body": item["data"],
                             "recorded": _about(self.job)})


def _same(frames: Frames) -> Frames:
    return frames
