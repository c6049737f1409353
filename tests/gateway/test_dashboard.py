"""The live dashboard: its routes in process, and the page in a real headless Chromium.

The browser test starts ``fastmode serve``, opens ``/dashboard`` in Chromium (Debian's package,
driven by selenium; nothing is downloaded), checks that the page receives samples, drives
traffic with the official SDK and waits until the buses show it, then writes a screenshot
(into ``$FASTMODE_SCREENSHOT_DIR`` too when set: that is how ``docs/img/dashboard.png`` is made).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port, start_server, stop_server
from openai import OpenAI

from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config
from fastmode.gateway.dashboard import feed

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture
async def app_and_client() -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    app = create_app()
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
    try:
        yield app, client
    finally:
        await client.aclose()
        await ctx.__aexit__(None, None, None)


async def test_page_and_assets_are_served_from_the_package(app_and_client) -> None:
    _, client = app_and_client
    page = await client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for asset in ("/dashboard/static/dashboard.js", "/dashboard/static/dashboard.css"):
        assert asset in page.text
        r = await client.get(asset)
        assert r.status_code == 200 and len(r.content) > 500
    assert "http://" not in page.text and "https://" not in page.text  # nothing from outside
    for bad in ("/dashboard/static/app.py", "/dashboard/static/..%2Fapp.py"):
        missing = await client.get(bad)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"  # the OpenAI error body


async def test_the_page_has_an_icon_from_the_package(app_and_client) -> None:
    """The dashboard once had no favicon (a 404 in every browser's console)."""
    _, client = app_and_client
    page = (await client.get("/dashboard")).text
    assert '<link rel="icon" type="image/svg+xml" href="/dashboard/static/favicon.svg">' in page
    icon = await client.get("/dashboard/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg") and b"href" not in icon.content  # self-contained
    root = await client.get("/favicon.ico")  # what a browser asks for by itself
    assert root.status_code == 200 and root.content == icon.content


async def test_state_shows_every_pool_replica_tier_and_the_fleet(app_and_client) -> None:
    app, client = app_and_client
    state = (await client.get("/dashboard/state")).json()
    gw = app.state.gateway
    assert set(state["pools"]) == set(gw.spec.deployments)
    for name, pool in state["pools"].items():
        assert len(pool["replicas"]) == gw.spec.fleet.pools[name].replicas
        for r in pool["replicas"]:
            assert r["ours"] + r["tenants"] + r["free"] == pool["max_batch"]
    # the other tenants are on the buses from the start (their mean load, moving per tick)
    std = state["pools"]["standard"]["replicas"]
    assert sum(r["tenants"] for r in std) / len(std) > 100
    assert set(state["tiers"]) == set(gw.spec.tiers)
    fleet = state["fleet"]
    assert fleet["policy"] == "proportional"
    assert fleet["nodes"]["b200"]["paid"] == gw.config.fleet.nodes["b200"].count
    assert fleet["provider_cost_usd"] >= 0


async def test_one_sampler_for_all_pages_and_none_when_nobody_watches(app_and_client) -> None:
    app, client = app_and_client
    dash = app.state.dashboard
    assert dash._task is None and dash.samples == 0  # nobody watches: nothing runs
    await client.get("/dashboard")
    assert dash.samples == 0
    pages = [dash.feed(), dash.feed()]
    heads = [await p.__anext__() for p in pages]  # both subscribed
    assert all(h.startswith(b":") for h in heads)
    frames = [await p.__anext__() for p in pages]
    assert all(f.startswith(b"event: state\ndata: {") for f in frames)
    assert frames[0] == frames[1]  # one sample, encoded once, for every page
    for p in pages:
        await p.aclose()
    assert not dash.pages
    deadline = time.monotonic() + 5
    while dash._task is not None:  # the sampler stops once the last page has gone
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    done = dash.samples
    await asyncio.sleep(3 * feed.INTERVAL_S)
    assert dash.samples == done


async def test_too_many_pages_get_a_429(app_and_client, monkeypatch) -> None:
    app, client = app_and_client
    monkeypatch.setattr(feed, "MAX_PAGES", 1)
    page = app.state.dashboard.feed()
    await page.__anext__()
    r = await client.get("/dashboard/feed")
    assert r.status_code == 429 and r.headers["retry-after"] == "5"
    assert r.json()["error"]["code"] == "too_many_dashboards"
    await page.aclose()


# ---------------------------------------------------------------------------------------------
# the page in a real browser
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    proc, url = start_server()
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1900", "--hide-scrollbars"):
        opts.add_argument(arg)
    # chromedriver must be told its port: a reserved one (conftest.free_port), not selenium's
    # pick-and-hope, which another test process can take first
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, port=free_port()), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_page_updates_live_under_traffic(served: str, browser: Any, tmp_path: Path) -> None:
    browser.get(served + "/dashboard")
    js = browser.execute_script
    until(lambda: int(js("return document.body.dataset.samples")) >= 2, 20, "two samples")
    assert browser.find_element("id", "status").text == "live"
    buses = until(lambda: js("return document.querySelectorAll('.bus').length"), 10, "buses")
    # one bus per replica of every pool of the default config
    assert buses == sum(d.replicas for d in load_config().deployments.values())
    tenants = js("return [...document.querySelectorAll('.bus')]"
                 ".map(b => Number(b.dataset.tenants)).reduce((a, b) => a + b, 0)")
    assert tenants > 500  # the other tenants ride before we send anything

    stop = threading.Event()

    def user(base: str, model: str) -> None:
        client = OpenAI(base_url=served + base, api_key="x", max_retries=0)
        while not stop.is_set():
            stream = client.chat.completions.create(
                model=model, max_tokens=400, stream=True, extra_body={"ignore_eos": True},
                messages=[{"role": "user", "content": "Explain continuous batching"}])
            for _ in stream:
                if stop.is_set():
                    break
            stream.close()

    routes = [("/v1", "frontier")] * 4 + [("/fast/v1", "frontier")] * 2 + [
        ("/v1", "frontier-spark")] * 2
    threads = [threading.Thread(target=user, args=r, daemon=True) for r in routes]
    for t in threads:
        t.start()
    try:
        def ours() -> int:
            return int(js("return [...document.querySelectorAll('.bus')]"
                          ".map(b => Number(b.dataset.ours)).reduce((a, b) => a + b, 0)"))

        until(lambda: ours() >= 3, 30, "our requests on the buses")
        until(lambda: int(js("return Number(document.querySelector("
                             "'[data-tier=standard]').dataset.requests)")) >= 1, 60,
              "a finished standard request in the tier card")
        shot = tmp_path / "dashboard.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 20_000
        out = os.environ.get("FASTMODE_SCREENSHOT_DIR")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(out) / "dashboard.png")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
