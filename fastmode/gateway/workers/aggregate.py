"""``/metrics`` of a multi-worker gateway: every worker's exposition, labelled ``worker``.

Each worker keeps its own Prometheus registry (its replicas, its requests). A scrape reaches one
worker through the shared port, so that worker gathers all of them over their private unix
sockets and merges the families, adding a ``worker`` label to every sample: counters sum across
workers in PromQL (``sum without (worker)``), and per-replica gauges stay distinct. A worker that
does not answer within ``timeout_s`` is left out of that scrape (and ``fastmode_workers_scraped``
says how many answered).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
from prometheus_client import CONTENT_TYPE_LATEST

LOCAL_HEADER = b"x-fastmode-worker-local"  # a peer asking for this worker's own metrics

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]


def merge(expositions: list[tuple[str, str]]) -> bytes:
    """``[(worker, text)]`` -> one exposition with a ``worker`` label on every sample.

    Done on the text: each worker's families in order (their ``# HELP`` / ``# TYPE`` lines
    once, at a family's first appearance), each sample line with ``worker="i"`` added to its
    labels. A sample line is ``name{labels} value`` or ``name value`` (Prometheus' text format
    0.0.4, as ``generate_latest`` writes it): numbers follow the labels, so a label set ends at
    the line's last ``}``. Parsing the texts into families and writing them again
    (prometheus_client's parser and ``generate_latest``) took 184 ms for two workers of the
    built-in config (6,000 lines), all of it on the event loop of the worker the scrape
    reached: every stream of that worker stood still. This takes ~5 ms;
    ``tests/gateway/test_workers.py`` checks it gives the parser's families."""
    order: list[str] = []  # family names, in the order first seen
    heads: dict[str, dict[str, str]] = {}  # family -> its HELP / TYPE lines, the first seen
    samples: dict[str, list[str]] = {}  # family -> sample lines, every worker's
    for worker, text in expositions:
        label = f'worker="{worker}"'
        family = ""
        for line in text.splitlines():
            if not line:
                continue
            if line[0] == "#":
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    if family not in heads:
                        order.append(family)
                        heads[family] = {}
                        samples[family] = []
                    heads[family].setdefault(parts[1], line)
                continue
            end = line.rfind("}")
            if end >= 0:  # name{labels} value: the label joins the set
                line = f"{line[:end]},{label}{line[end:]}" if line[end - 1] != "{" \
                    else f"{line[:end]}{label}{line[end:]}"
            else:  # name value
                space = line.index(" ")
                line = f"{line[:space]}{{{label}}}{line[space:]}"
            if family not in samples:  # a sample before any HELP / TYPE: its own family
                order.append(family)
                heads[family] = {}
                samples[family] = []
            samples[family].append(line)
    out: list[str] = []
    for family in order:
        out += heads[family].values()
        out += samples[family]
    out += ["# HELP fastmode_workers_scraped Worker processes whose metrics this scrape includes",
            "# TYPE fastmode_workers_scraped gauge",
            f"fastmode_workers_scraped {float(len(expositions))}", ""]
    return "\n".join(out).encode()


class WorkerMetrics:
    """ASGI wrapper: ``GET /metrics`` from a client gathers every worker's metrics."""

    def __init__(self, app: ASGIApp, sockets: list[str], timeout_s: float = 2.0) -> None:
        self.app = app
        self.sockets = sockets  # one unix socket per worker, index = worker number
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope["path"] != "/metrics"
                or any(k == LOCAL_HEADER for k, _ in scope.get("headers", []))):
            await self.app(scope, receive, send)
            return
        texts = await asyncio.gather(*(self._fetch(p) for p in self.sockets))
        body = merge([(str(i), t) for i, t in enumerate(texts) if t is not None])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _fetch(self, path: str) -> str | None:
        transport = httpx.AsyncHTTPTransport(uds=path)
        try:
            async with httpx.AsyncClient(transport=transport, timeout=self.timeout_s) as c:
                r = await c.get("http://worker/metrics", headers={LOCAL_HEADER.decode(): "1"})
                return r.text if r.status_code == 200 else None
        except httpx.HTTPError:
            return None
