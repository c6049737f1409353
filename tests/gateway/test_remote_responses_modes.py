"""Background mode, compaction and image input on a remote tier: the same pipeline
as in process, the work done by the upstream engine (the scripted fakes of test_remote.py).
"""
# ruff: noqa: F811 - `topo` is the fixture imported from test_remote, used as a parameter

from __future__ import annotations

import asyncio

import httpx
from test_remote import aclient, topo  # noqa: F401
from test_remote_protocols import bodies


async def test_background_runs_on_the_upstream(topo) -> None:
    client = aclient(topo["gw"])
    created = await client.responses.create(model="frontier", input="hello", background=True)
    assert created.background is True and created.status in ("queued", "in_progress")
    for _ in range(200):
        done = await client.responses.retrieve(created.id)
        if done.status not in ("queued", "in_progress"):
            break
        await asyncio.sleep(0.02)
    assert done.status == "completed"
    assert done.output_text == "t0 t1 t2 t3 t4 "  # the upstream wrote it, streamed
    assert bodies(topo)[0]["stream"] is True


async def test_compaction_runs_on_the_upstream(topo) -> None:
    async with httpx.AsyncClient(base_url=topo["gw"], timeout=10) as c:
        answer = await c.post("/fast/v1/responses/compact", json={
            "model": "frontier", "input": [
                {"role": "user", "content": "When?"},
                {"role": "assistant", "content": "Tuesday, and support first."}]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [i["type"] for i in body["output"]] == ["message", "compaction"]
    assert body["usage"]["output_tokens"] == 5  # the engine's count of its summary
    up = bodies(topo)[0]
    assert up["ignore_eos"] is True and up["max_tokens"] > 0


async def test_image_parts_go_upstream_as_image_url(topo) -> None:
    url = "https://example.invalid/cat.png"
    await aclient(topo["gw"]).responses.create(model="frontier", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "what is it?"},
                                     {"type": "input_image", "image_url": url}]}])
    parts = bodies(topo)[0]["messages"][0]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": url}}
