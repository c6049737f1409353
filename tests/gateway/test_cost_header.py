"""``x-fastmode-cost-usd`` prints the number the body's ``usage.cost_usd`` and the ledger keep:
every digit of it (whole nano-dollars, ``gateway.money``), on every non-streamed protocol and on
a tier whose prices give costs with a ninth digit (spark)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from conftest import started_app

from fastmode.gateway.money import COST_DIGITS, cost_text


@pytest.fixture
async def app(tmp_path) -> AsyncIterator[Any]:
    async with started_app(tmp_path) as application:
        yield application


def requests(model: str, n: int, prompt: str) -> dict[str, tuple[str, dict[str, Any]]]:
    words = [{"role": "user", "content": prompt}]
    return {
        "chat": ("/v1/chat/completions", {"model": model, "messages": words, "max_tokens": n}),
        "responses": ("/v1/responses", {"model": model, "input": prompt,
                                        "max_output_tokens": n}),
        "messages": ("/v1/messages", {"model": model, "messages": words, "max_tokens": n}),
        "completions": ("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": n}),
    }


async def test_the_cost_header_is_the_bodys_and_the_ledgers_number(app: Any) -> None:
    seen: dict[str, tuple[str, float]] = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        for model in ("frontier", "frontier-spark"):
            for n, prompt in ((7, "Hello there"), (23, "The KV cache " * 9), (41, "Why? " * 31)):
                for name, (route, body) in requests(model, n, prompt).items():
                    r = await c.post(route, json=body)
                    assert r.status_code == 200, (name, r.text)
                    header = r.headers["x-fastmode-cost-usd"]
                    assert len(header.partition(".")[2]) == COST_DIGITS, header
                    number = r.json()["usage"]["cost_usd"]
                    assert float(header) == number and header == cost_text(number), (name, header)
                    seen[r.headers["x-request-id"]] = (header, number)
    rows = {row.request_id: row for row in await app.state.gateway.state.usage_rows()}
    for rid, (header, number) in seen.items():
        assert rows[rid].cost_usd == number == float(header), (rid, header)
    # a cost with a ninth digit was among them (what 8 printed digits lost)
    assert any(header[-1] != "0" for header, _ in seen.values())
