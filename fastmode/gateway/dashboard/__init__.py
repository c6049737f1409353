"""``/dashboard``: the live view of the buses filling, served by the gateway itself.

- ``GET /dashboard``: the page (plain HTML, CSS and JavaScript shipped in the package: no build
  step, nothing fetched from the network);
- ``GET /dashboard/static/NAME``: its assets (``GET /favicon.ico`` is its icon, an SVG);
- ``GET /dashboard/feed``: server-sent events, one ``state`` event per sample, one feed per page
  (``feed.Dashboard``: the sampler runs only while a page is connected);
- ``GET /dashboard/state``: one snapshot as JSON (for scripts and ``fastmode bench``).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import FastAPI
from starlette.responses import Response, StreamingResponse

from fastmode.gateway.dashboard.feed import Dashboard
from fastmode.gateway.errors import APIError
from fastmode.gateway.http.json_response import json_response

ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


def _asset(name: str) -> bytes:
    return resources.files("fastmode.gateway.dashboard").joinpath("static", name).read_bytes()


def add_routes(app: FastAPI, gateway: Any) -> Dashboard:
    dashboard = app.state.dashboard = Dashboard(gateway)
    page = _asset("index.html")
    assets = {name: _asset(name) for name in ASSETS}

    @app.get("/dashboard")
    async def dashboard_page() -> Response:
        return Response(page, media_type="text/html; charset=utf-8",
                        headers={"cache-control": "no-cache"})

    @app.get("/dashboard/static/{name}")
    async def dashboard_asset(name: str) -> Response:
        if name not in assets:
            raise APIError(404, f"Unknown dashboard asset {name!r}", code="not_found")
        return Response(assets[name], media_type=ASSETS[name],
                        headers={"cache-control": "no-cache"})

    @app.get("/favicon.ico")
    async def favicon() -> Response:
        return Response(assets["favicon.svg"], media_type=ASSETS["favicon.svg"],
                        headers={"cache-control": "max-age=86400"})

    @app.get("/dashboard/state")
    async def dashboard_state() -> Response:
        return json_response(dashboard.snapshot())

    @app.get("/dashboard/feed")
    async def dashboard_feed() -> Response:
        if dashboard.full():
            raise APIError(429, "Too many dashboards are open on this server.",
                           code="too_many_dashboards", headers={"retry-after": "5"})
        return StreamingResponse(
            dashboard.feed(), media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    return dashboard
