"""A finished request leaves no reference cycle of the gateway's or the engine's objects.

Such a cycle is freed only by the cyclic garbage collector: one per request fed it ~13 objects
(the job, its token stream and sequence, the encoder and its event buffer, their lists), and its
collections, one every ~25 requests and a full one every ~2,000, took 41-50 us of a short
request's ~300 us of CPU in process and held the event loop for up to 12 ms (measured:
docs/streaming.md, "Where the time goes"). The objects of a finished turn must be freed by reference
counting alone.

Every protocol through a real uvicorn server and the official SDKs: Chat (streamed and not),
Responses over SSE and over the websocket, Anthropic Messages, and a stream the client leaves;
and a remote tier's turns (its upstream stream held its ``on_end``, which held the job).
"""

from __future__ import annotations

import asyncio
import gc
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator

import anthropic
import openai
import pytest
from test_remote import aclient, serve, topo  # noqa: F401 - topo: a fixture

from fastmode.gateway.app import create_app
from fastmode.gateway.config import Config, default_config_text

OURS = ("fastmode.gateway.", "fastmode.backends.")


def ours_in(objects: list[object]) -> Counter[str]:
    return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects
                   if type(o).__module__.startswith(OURS))


@pytest.fixture
def new_garbage() -> Iterator[Callable[[], list[object]]]:
    """A call that collects and returns what the cyclic collector found (``DEBUG_SAVEALL``
    keeps it) since the test began, of the objects made since: another test's leftovers that
    only become garbage now (their event loop closed late) are not this test's."""
    gc.collect()
    gc.garbage.clear()
    before = {id(o) for o in gc.get_objects()}
    gc.set_debug(gc.DEBUG_SAVEALL)

    def collect() -> list[object]:
        gc.collect()
        found = [o for o in gc.garbage if id(o) not in before]
        gc.garbage.clear()
        return found

    try:
        yield collect
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_no_turn_leaves_a_cycle_on_any_protocol(new_garbage) -> None:
    app = create_app(Config.model_validate(tomllib.loads(default_config_text())))
    async with serve(app, ws="websockets-sansio") as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "hello"}]
        # warm-up: first-use caches (schemas, encoders' run tables) are not garbage
        await client.chat.completions.create(model="frontier", messages=msgs, max_tokens=8)
        new_garbage()
        for _ in range(3):
            await client.chat.completions.create(model="frontier", messages=msgs, max_tokens=8)
            stream = await client.chat.completions.create(
                model="frontier", messages=msgs, max_tokens=8, stream=True)
            assert len([c async for c in stream]) >= 8
            async with client.responses.stream(model="frontier", input="hello",
                                               max_output_tokens=8) as events:
                kinds = [e.type async for e in events]
            assert kinds[-1] in ("response.completed", "response.incomplete")  # at the cap
            async with claude.messages.stream(model="frontier", max_tokens=8,
                                              messages=msgs) as s:
                assert (await s.get_final_message()).usage.output_tokens <= 8
            async with client.responses.connect() as conn:
                await conn.response.create(model="frontier", input="hello",
                                           max_output_tokens=8)
                async for event in conn:
                    if event.type in ("response.completed", "response.incomplete"):
                        break
            # a client that leaves mid-stream: its turn is cancelled
            left = await client.chat.completions.create(
                model="frontier", messages=msgs, max_tokens=400, stream=True)
            async for _ in left:
                break
            await left.close()
        await asyncio.sleep(0.3)  # the cancelled turn and the replica's next step ran
        await client.close()
        await claude.close()
        found = new_garbage()
    assert ours_in(found) == Counter()


async def test_no_remote_turn_leaves_a_cycle(topo, new_garbage) -> None:  # noqa: F811
    client = aclient(topo["gw"])  # the fast tier: two scripted upstreams (test_remote)
    msgs = [{"role": "user", "content": "hello"}]
    await client.chat.completions.create(model="frontier", messages=msgs)
    new_garbage()
    for _ in range(3):
        await client.chat.completions.create(model="frontier", messages=msgs)
        stream = await client.chat.completions.create(model="frontier", messages=msgs,
                                                      stream=True)
        assert [c async for c in stream]
        async with client.responses.stream(model="frontier", input="hello") as events:
            assert [e.type async for e in events][-1] == "response.completed"
    await asyncio.sleep(0.2)
    assert ours_in(new_garbage()) == Counter()
