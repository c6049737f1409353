"""The pytest plugin's per-test API across worker processes (``fastmode serve --workers N``).

A test registers its replies, faults and cassette through one connection, hence one worker,
and its requests reach any worker (the kernel spreads connections). So a worker that gets a
per-test admin call passes it on to every worker over their private unix sockets (itself
included) before it answers (503 when one does not: the test's state would be missing there, so the
call is to be retried): each holds the test's replies and faults, and their counted uses
are claimed in one shared file (``gateway.testing.claims``) so "once" is once for all. A read
(``GET /admin/tests/{id}``, ``GET /v1/fastmode/journal``) gathers every worker's part: the
journal merged in admission order, the uses summed. A worker that does not answer (restarting)
is left out, as for ``/metrics`` (``aggregate``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
from starlette.types import ASGIApp, Scope

from fastmode.gateway.workers.aggregate import LOCAL_HEADER

JOURNALS = ("/v1/fastmode/journal", "/fast/v1/fastmode/journal")


def _ours(scope: Scope) -> bool:
    if scope["type"] != "http":
        return False
    path = scope["path"]
    return ((path.startswith("/admin/tests/") or path in JOURNALS)
            and not any(k == LOCAL_HEADER for k, _ in scope.get("headers", [])))


class WorkerTests:
    """ASGI wrapper: a per-test admin call to every worker, a per-test read from all."""

    def __init__(self, app: ASGIApp, sockets: list[str], timeout_s: float = 10.0) -> None:
        self.app = app
        self.sockets = sockets
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if not _ours(scope):
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                   if k.lower() not in (b"host", b"content-length")}
        headers[LOCAL_HEADER.decode()] = "1"
        url = scope["path"] + (f"?{scope['query_string'].decode()}"
                               if scope.get("query_string") else "")
        answers = await asyncio.gather(*(self._call(p, scope["method"], url, headers, body)
                                         for p in self.sockets))
        got = [a for a in answers if a is not None]
        missing = [i for i, a in enumerate(answers) if a is None]
        if not got or (missing and scope["method"] != "GET"):
            # a test's state that some worker lacks would answer its requests there unscripted
            status, out = 503, orjson.dumps({"error": {
                "message": f"Worker(s) {', '.join(map(str, missing))} did not answer (still "
                           "starting, or restarting): retry.", "type": "service_unavailable",
                "param": None, "code": "workers_unavailable"}})
        else:
            status, out = got[0]
            if scope["method"] == "GET" and status == 200:
                out = merge(scope["path"], [o for s, o in got if s == 200])
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})

    async def _call(self, path: str, method: str, url: str, headers: dict[str, str],
                    body: bytes) -> tuple[int, bytes] | None:
        transport = httpx.AsyncHTTPTransport(uds=path)
        try:
            async with httpx.AsyncClient(transport=transport, timeout=self.timeout_s) as c:
                r = await c.request(method, "http://worker" + url, headers=headers,
                                    content=body)
                return r.status_code, r.content
        except httpx.HTTPError:
            return None


def merge(path: str, bodies: list[bytes]) -> bytes:
    """Every worker's view of a test as one: the first's rules with every worker's uses, the
    journals (and cassette misses) joined in admission order."""
    docs = [orjson.loads(b) for b in bodies]
    if path in JOURNALS:
        data = sorted((e for d in docs for e in d.get("data", [])), key=lambda e: e["at"])
        return orjson.dumps({"object": "list", "data": data})
    out = docs[0]
    for key in ("replies", "faults"):
        for i, item in enumerate(out.get(key, [])):
            item["used"] = sum(d[key][i]["used"] for d in docs if i < len(d.get(key, [])))
    out["journal"] = sorted((e for d in docs for e in d.get("journal", [])),
                            key=lambda e: e["at"])
    cassettes = [d["cassette"] for d in docs if d.get("cassette")]
    if cassettes:
        out["cassette"] = {**cassettes[0],
                           "recorded": sum(c["recorded"] for c in cassettes),
                           "misses": [m for c in cassettes for m in c["misses"]]}
    return orjson.dumps(out)
