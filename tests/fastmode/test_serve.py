"""``fastmode.serve``: a gateway for a ``with`` block, in a thread or a child process."""

from __future__ import annotations

import httpx
import pytest

import fastmode

ASK = [{"role": "user", "content": "hello"}]


def test_in_process_server_answers_and_stops() -> None:
    with fastmode.serve(time_scale=0.01) as server:
        r = server.openai().chat.completions.create(model="frontier-spark", messages=ASK,
                                                     max_tokens=20)
        assert r.choices[0].message.content and r.usage.completion_tokens > 0
        msg = server.anthropic().messages.create(model="frontier", max_tokens=20,
                                                 messages=ASK)
        assert msg.usage.output_tokens > 0
        url = server.url
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/healthz", timeout=1)


def test_an_exception_in_the_block_stops_the_server() -> None:
    with pytest.raises(ZeroDivisionError), fastmode.serve() as server:
        url = server.url
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
        raise ZeroDivisionError
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/healthz", timeout=1)


async def test_async_with_in_a_child_process(tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    async with fastmode.serve(process=True, time_scale=0.01, ledger=str(ledger)) as server:
        async with httpx.AsyncClient() as client:
            r = await client.post(server.url + "/v1/chat/completions", json={
                "model": "frontier-spark", "messages": ASK, "max_tokens": 10})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 0
        url = server.url
    assert ledger.exists()  # the ledger named, kept
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/healthz", timeout=1)
