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
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

LOCAL_HEADER = b"x-fastmode-worker-local"  # a peer asking for this worker's own metrics

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]


class _Merged:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def merge(expositions: list[tuple[str, str]]) -> bytes:
    """``[(worker, text)]`` -> one exposition with a ``worker`` label on every sample."""
    merged: dict[str, Metric] = {}
    for worker, text in expositions:
        for fam in text_string_to_metric_families(text):
            out = merged.get(fam.name)
            if out is None:
                out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            out.samples.extend(s._replace(labels={**s.labels, "worker": worker})
                               for s in fam.samples)
    scraped = GaugeMetricFamily("fastmode_workers_scraped",
                                "Worker processes whose metrics this scrape includes")
    scraped.add_metric([], len(expositions))
    return generate_latest(_Merged([*merged.values(), scraped]))


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
