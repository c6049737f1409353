"""The bare reference of ``gateway_overhead.py``: fastmode's bytes at fastmode's pace, no framework.

A raw ASGI app under the same uvicorn set-up as ``fastmode serve`` (uvloop, httptools,
websockets-sansio, no per-message deflate) that replays streams recorded from fastmode: the
same events, byte for byte, over SSE or as websocket text frames. It keeps only what pacing
needs, built the way the gateway's hot path is: one ticker (one timer per tick, like one engine
replica, slipping as a replica does when served late), each stream woken on the tick its next
event is due (a future per tick, shared by every stream due then), and a stream that fell
behind sends everything due in one write. What
fastmode spends beyond this app is its framework, its protocol work and its bookkeeping.

A request may say when its stream starts: ``/NAME?after=SECONDS`` sends the response head at
once and the stream's first event that much later (in ticks), the way fastmode holds a request
that waits in the engine's queue for a free slot. ``bench/pacing.py`` replays fastmode's own
schedule that way (each stream starts when fastmode's stream of the same rank did), so the two
servers carry the same number of concurrent streams and the comparison is the gateway's cost,
not the engine's seating.

``--server granian`` runs the same app under granian instead (a Rust HTTP core; not a
dependency of fastmode: ``.venv/bin/pip install granian``), for ``asgi_servers.py``: its ASGI
interface with lifespan, one worker process, a single-threaded Rust runtime with one thread
of each kind it has (``runtime_threads``, ``runtime_blocking_threads``, ``blocking_threads``:
the fewest it allows; one core serves anyway), uvloop, HTTP/1 only (what uvicorn speaks),
websockets on, no access log. granian imports the app afresh in its worker, so the captures
and the pace reach the app through the environment (``BARE_ASGI_CAPTURES``, ``BARE_ASGI_ITL``),
read at lifespan start-up; under uvicorn the app reads them the same way.

Usage: python bench/bare_asgi.py PORT CAPTURES_JSON ITL_SECONDS [--server uvicorn|granian]
  CAPTURES_JSON: {name: {"opening": str, "events": [str], "closing": str, "tokens": n,
                  "interval": g}}; a request to /NAME (POST, SSE) or a websocket to /NAME
                  (after one client frame) streams that capture.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ("uvicorn", "granian")
ENV_CAPTURES, ENV_ITL = "BARE_ASGI_CAPTURES", "BARE_ASGI_ITL"
GRANIAN_MISSING = "granian is not installed: .venv/bin/pip install granian"

TOLERANCE_S = 0.002  # fastmode's PACING_TOLERANCE_S: the same pacing rule on both servers


class Ticker:
    """Tick ``index`` every ``itl`` seconds on the event loop's clock; ``at(i)`` resolves at
    tick ``i``. Paced by fastmode's rule (``backends.drivers.realtime``): a tick late by up to
    ``TOLERANCE_S`` is made up by the next sleep; later than that, the timeline slips (the next
    tick is planned from when this one ran), counted in ``slips`` / ``slipped`` and served as
    ``fastmode_host_lag_seconds`` on ``/metrics``, so both servers are held to one rule."""

    def __init__(self, itl: float) -> None:
        self.itl = itl
        self.index = 0
        self.waiters: dict[int, asyncio.Future[None]] = {}
        self.slips = 0
        self.slipped = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        t = loop.time()
        while True:
            t += self.itl
            delay = t - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            late = loop.time() - t
            if late > TOLERANCE_S:
                t += late
                self.slips += 1
                self.slipped += late
            self.index += 1
            fut = self.waiters.pop(self.index, None)
            if fut is not None:
                fut.set_result(None)

    def at(self, index: int) -> asyncio.Future[None]:
        fut = self.waiters.get(index)
        if fut is None:
            fut = self.waiters[index] = asyncio.get_running_loop().create_future()
        return fut


class Capture:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.opening: str = raw["opening"]
        self.events: list[str] = raw["events"]
        self.closing: str = raw["closing"]
        n, g = raw["tokens"], raw["interval"]
        # tokens that must exist before event e goes out: its last token is due then
        self.due = [min((e + 1) * g, n) for e in range(len(self.events))]
        self.bopening = self.opening.encode()
        self.bevents = [e.encode() for e in self.events]
        self.bclosing = self.closing.encode()


TICKER: Ticker
CAPTURES: dict[str, Capture] = {}


def start_delay(scope: dict[str, Any]) -> float:
    """The ``after`` query parameter: seconds before the stream's first event (0 if absent)."""
    for part in scope.get("query_string", b"").split(b"&"):
        name, _, value = part.partition(b"=")
        if name == b"after":
            return max(0.0, float(value))
    return 0.0


async def held(after: float) -> None:
    """Wait ``after`` seconds on the ticker (whole ticks): a stream waiting for its slot."""
    ticker = TICKER
    ticks = round(after / ticker.itl)
    if ticks > 0:
        await ticker.at(ticker.index + ticks)


def load() -> None:
    """The streams to replay and their pace, from the environment ``main`` set: the same in
    the process that parsed the command line (uvicorn) and in a worker a server started
    (granian imports this module afresh there). Once per process."""
    global TICKER
    if CAPTURES:
        return
    TICKER = Ticker(float(os.environ[ENV_ITL]))
    for name, raw in orjson.loads(Path(os.environ[ENV_CAPTURES]).read_bytes()).items():
        CAPTURES[name] = Capture(raw)


async def paced(cap: Capture, emit: Any) -> None:
    """Hand ``emit`` each run of events as it falls due (one call per wake-up)."""
    ticker = TICKER
    t0 = ticker.index
    due, k, e = cap.due, len(cap.due), 0
    while e < k:
        target = t0 + due[e]
        if ticker.index < target:
            await ticker.at(target)
        now = ticker.index - t0
        j = e + 1
        while j < k and due[j] <= now:
            j += 1
        await emit(e, j)
        e = j


async def http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["path"] in ("/healthz", "/metrics"):
        body = b"ok" if scope["path"] == "/healthz" else (
            f"fastmode_host_lag_seconds_count {TICKER.slips}\n"
            f"fastmode_host_lag_seconds_sum {TICKER.slipped}\n".encode())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    while True:  # the request body is read, as a server must
        m = await receive()
        if not m.get("more_body"):
            break
    cap = CAPTURES[scope["path"].strip("/")]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    await held(start_delay(scope))
    await send({"type": "http.response.body", "body": cap.bopening, "more_body": True})
    events = cap.bevents

    async def emit(e: int, j: int) -> None:
        body = events[e] if j == e + 1 else b"".join(events[e:j])
        await send({"type": "http.response.body", "body": body, "more_body": True})

    await paced(cap, emit)
    await send({"type": "http.response.body", "body": cap.bclosing, "more_body": False})


async def websocket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    cap = CAPTURES[scope["path"].strip("/")]
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        m = await receive()
        if m["type"] == "websocket.disconnect":
            return
        for ev in cap.opening.split("\n")[:-1] if cap.opening else []:
            await send({"type": "websocket.send", "text": ev})
        async def emit(e: int, j: int) -> None:
            for i in range(e, j):
                await send({"type": "websocket.send", "text": cap.events[i]})

        await paced(cap, emit)
        for ev in cap.closing.split("\n")[:-1]:
            await send({"type": "websocket.send", "text": ev})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                load()
                asyncio.get_running_loop().create_task(TICKER.run())
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await websocket(scope, receive, send)
    else:
        await http(scope, receive, send)


def serve_uvicorn(port: int) -> None:
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                loop="uvloop",
                http="httptools", ws="websockets-sansio", ws_per_message_deflate=False,
                lifespan="on")


def serve_granian(port: int) -> None:
    try:
        from granian.constants import HTTPModes, Interfaces, Loops, RuntimeModes
        from granian.log import LogLevels
        from granian.server import Server
    except ImportError:
        raise SystemExit(GRANIAN_MISSING) from None
    Server("bench.bare_asgi:app", address="127.0.0.1", port=port,
           interface=Interfaces.ASGI, workers=1, runtime_mode=RuntimeModes.st,
           runtime_threads=1, runtime_blocking_threads=1, blocking_threads=1,
           loop=Loops.uvloop, http=HTTPModes.http1, websockets=True,
           log_level=LogLevels.warning, log_access=False, working_dir=ROOT).serve()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("captures", type=Path, help="the captures JSON to replay")
    ap.add_argument("itl", type=float, help="seconds between ticks")
    ap.add_argument("--server", choices=SERVERS, default="uvicorn")
    args = ap.parse_args()
    os.environ[ENV_CAPTURES] = str(args.captures.resolve())
    os.environ[ENV_ITL] = repr(args.itl)
    load()  # a bad captures file fails here, before a server starts
    (serve_granian if args.server == "granian" else serve_uvicorn)(args.port)


if __name__ == "__main__":
    main()
