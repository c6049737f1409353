"""KV-cache events, consumed as a KV-aware router does: subscribe to a running engine's ZMQ
PUB socket, decode vLLM's msgpack batches with vLLM's own struct shapes (declared here, not
imported), fill gaps from the replay socket, rebuild the cache's blocks and compare them with
the engine's own: stored blocks, hits on a repeated prefix, removals on eviction, the clear of
a reset, and a subscriber that joins late and replays everything."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest
import zmq
import zmq.asyncio

from fastmode.cli import build_parser
from fastmode.cli.engine import apply_flags
from fastmode.gateway.app import create_app
from fastmode.gateway.config import ConfigError, load_config
from fastmode.gateway.engine_config import engine_config
from fastmode.gateway.observe.kv_events import offset_endpoint

LONG = " ".join(f"step{i} of the agent's shared tool manual" for i in range(50))


# -- vLLM's event types, as its subscriber example declares them ------------------------------

class Batch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class Event(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(Event):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(Event):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(Event):
    pass


class KVEventBatch(Batch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


DECODE = msgspec.msgpack.Decoder(KVEventBatch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_pair() -> int:
    """A port whose next one is free too (replica i of an engine binds the endpoint's port + i)."""
    while True:
        base = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base


class Router:
    """A subscriber's view of one engine: the blocks it holds, rebuilt from events."""

    def __init__(self) -> None:
        self.blocks: dict[int, int | None] = {}  # hash -> parent hash
        self.next_seq = 0
        self.stored_twice = 0

    def apply(self, seq: int, payload: bytes) -> None:
        assert seq == self.next_seq, (seq, self.next_seq)
        self.next_seq += 1
        for ev in DECODE.decode(payload).events:
            if isinstance(ev, BlockStored):
                assert len(ev.token_ids) == ev.block_size * len(ev.block_hashes)
                assert all(0 <= t < 1 << 32 for t in ev.token_ids)  # llm-d's []uint32
                parent = ev.parent_block_hash
                assert parent is None or parent in self.blocks  # chains are whole
                for h in ev.block_hashes:
                    self.stored_twice += h in self.blocks
                    self.blocks[h] = parent
                    parent = h
            elif isinstance(ev, BlockRemoved):
                for h in ev.block_hashes:
                    assert h in self.blocks
                    del self.blocks[h]
            else:
                self.blocks.clear()


async def replay(endpoint: str, router: Router, ctx: zmq.asyncio.Context) -> int:
    """Ask the replay socket for every batch from ``router.next_seq`` on."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    await dealer.send_multipart((b"", router.next_seq.to_bytes(8, "big")))
    got = 0
    try:
        while True:
            _, seq, payload = await asyncio.wait_for(dealer.recv_multipart(), 10)
            n = int.from_bytes(seq, "big", signed=True)
            if n < 0:
                return got
            router.apply(n, payload)
            got += 1
    finally:
        dealer.close(0)


async def catch_up(sub: zmq.asyncio.Socket, router: Router, replay_at: str, publisher: Any,
                   ctx: zmq.asyncio.Context) -> None:
    """Read what the PUB socket delivered; replay whatever a slow join or a gap lost."""
    while await sub.poll(200):
        topic, seq, payload = await sub.recv_multipart()
        assert topic == b"kv-events"
        n = int.from_bytes(seq, "big")
        if n > router.next_seq:
            await replay(replay_at, router, ctx)
        if n == router.next_seq:
            router.apply(n, payload)
    if router.next_seq < publisher.seq:
        await replay(replay_at, router, ctx)
    assert router.next_seq == publisher.seq


@pytest.fixture
async def engine() -> AsyncIterator[tuple[httpx.AsyncClient, Any, str, str]]:
    pub, rep = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    args = build_parser().parse_args([
        "engine", "--deployment", "spark", "--kv-events-config", json.dumps({
            "enable_kv_cache_events": True, "publisher": "zmq", "endpoint": pub,
            "topic": "kv-events", "replay_endpoint": rep})])
    app = create_app(engine_config(apply_flags(load_config(), args), "spark", 1))
    ctx = app.router.lifespan_context(app)
    await ctx.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e")
    try:
        yield client, app, pub, rep
    finally:
        await client.aclose()
        await ctx.__aexit__(None, None, None)


async def chat(client: httpx.AsyncClient, question: str) -> dict[str, Any]:
    model = (await client.get("/v1/models")).json()["data"][0]["id"]
    r = await client.post("/v1/chat/completions", json={
        "model": model, "max_tokens": 2,
        "messages": [{"role": "system", "content": LONG}, {"role": "user", "content": question}]})
    assert r.status_code == 200
    return r.json()


async def test_a_router_rebuilds_the_cache_from_events(engine) -> None:
    client, app, pub_at, replay_at = engine
    publisher = app.state.kv_events.publishers[0]
    cache = app.state.gateway.deployments["spark"].replicas[0].scheduler.cache
    assert cache.listener is publisher and publisher.rank is None
    ctx = zmq.asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv-events")
    sub.connect(pub_at)
    router = Router()
    try:
        await chat(client, "Which tool lists files?")
        await catch_up(sub, router, replay_at, publisher, ctx)
        assert router.blocks and set(router.blocks) == set(cache._entries)
        held = len(router.blocks)
        # a repeated prefix hits the stored blocks; only the new ones are announced
        usage = (await chat(client, "Which tool reads one?"))["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] > 0
        await catch_up(sub, router, replay_at, publisher, ctx)
        assert set(router.blocks) == set(cache._entries) and len(router.blocks) > held
        assert router.stored_twice == 0
        # memory pressure evicts the least recently used blocks: removals
        freed = cache.evict(16 * 3)
        assert freed >= 48
        await catch_up(sub, router, replay_at, publisher, ctx)
        assert set(router.blocks) == set(cache._entries) and len(router.blocks) < held * 2
        kept = dict(router.blocks)
        # a late subscriber replays everything still buffered and sees the same cache
        late = Router()
        assert await replay(replay_at, late, ctx) == publisher.seq
        assert late.blocks == kept
        # a reset clears it all
        assert (await client.post("/reset_prefix_cache")).status_code == 200
        await catch_up(sub, router, replay_at, publisher, ctx)
        assert router.blocks == {} and len(cache) == 0
    finally:
        sub.close(0)
        ctx.term()


def test_endpoints_of_several_replicas() -> None:
    assert offset_endpoint("tcp://*:5557", 0) == "tcp://*:5557"
    assert offset_endpoint("tcp://*:5557", 2) == "tcp://*:5559"
    assert offset_endpoint("ipc:///tmp/kv", 1) == "ipc:///tmp/kv_1"


@pytest.mark.parametrize("value,match", [
    ("{nope", "not valid JSON"),
    ('{"publisher": "kafka"}', "publisher"),
    ('{"buffer_steps": 0}', "buffer_steps"),
])
def test_bad_kv_events_config(value, match) -> None:
    args = build_parser().parse_args(["engine", "--deployment", "spark",
                                      "--kv-events-config", value])
    with pytest.raises(ConfigError, match=match):
        apply_flags(load_config(), args)


def test_events_need_blocks() -> None:
    from fastmode.gateway.observe.kv_events import KVEvents

    cfg = load_config()
    dep = cfg.deployments["spark"]
    on = dep.model_copy(update={"kv_events": type(dep).model_fields["kv_events"].annotation
                                .__args__[0](enable_kv_cache_events=True, publisher="zmq")})
    cfg = cfg.model_copy(update={"deployments": {**cfg.deployments, "spark": on}})
    app = create_app(cfg)  # the gateway: its caches keep the providers' steps

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(ValueError, match="needs the cache in blocks"):
        asyncio.run(start())
    assert KVEvents().publishers == []


def test_the_kubernetes_engine_publishes_events() -> None:
    from pathlib import Path

    import yaml

    docs = yaml.safe_load_all((Path(__file__).parents[2] / "deploy/k8s/engines.yaml").read_text())
    pod = next(d for d in docs if d and d["kind"] == "Deployment"
               and d["metadata"]["name"] == "fastmode-engine-standard")
    c = pod["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(c["command"][1:])
    cfg = apply_flags(load_config(), args).deployments["standard"].kv_events
    assert cfg is not None and cfg.on and cfg.replay_endpoint == "tcp://*:5558"
    assert {p["containerPort"] for p in c["ports"]} >= {5557, 5558}


def test_wire_layout_and_ranks() -> None:
    from fastmode.backends.config import KVEventsConfig
    from fastmode.gateway.observe.kv_events import Publisher

    base = free_pair()
    cfg = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                         endpoint=f"tcp://127.0.0.1:{base}")
    pubs = [Publisher(cfg, None, 0), Publisher(cfg, 1, 1)]
    try:
        assert pubs[1].endpoint == f"tcp://127.0.0.1:{base + 1}"
        for p in pubs:  # no event loop running: each event goes out at once
            p.stored([11, 12], None, list(range(32)), 16)
            p.removed([12])
            p.cleared()
        raw = [msgspec.msgpack.decode(p.buffer[0][1]) for p in pubs]
        # msgspec writes every field of an array-like struct, as vLLM's batches carry them
        assert (len(raw[0]), raw[0][2], raw[1][2]) == (3, None, 1)
        assert raw[0][1] == [["BlockStored", [11, 12], None, list(range(32)), 16, None, "GPU"]]
        assert [p.seq for p in pubs] == [3, 3]
        kinds = [type(DECODE.decode(payload).events[0]).__name__ for _, payload in pubs[0].buffer]
        assert kinds == ["BlockStored", "BlockRemoved", "AllBlocksCleared"]
        assert msgspec.msgpack.decode(pubs[0].buffer[2][1])[1] == [["AllBlocksCleared"]]
    finally:
        for p in pubs:
            asyncio.run(p.close())


def test_blocks_of_an_adapter_carry_its_lora_id() -> None:
    """vLLM's ``BlockStored.lora_id``: the blocks a LoRA request stores are reported under its
    adapter's int id (vLLM's ``lora_int_id``), the base model's under none; read off the
    publisher's wire messages, decoded as a router decodes them."""
    from virtual_app import app_client, run_app_virtual

    flags = ["engine", "--deployment", "oss", "-dp", "1", "--enable-lora", "--lora-modules",
             "sql=/adapters/sql", "chat=/adapters/chat", "--max-loras", "2",
             "--kv-events-config", json.dumps({"enable_kv_cache_events": True,
                                               "publisher": "zmq",
                                               "endpoint": f"tcp://127.0.0.1:{free_port()}"})]
    args, extra = build_parser().parse_known_args(flags)
    args.ignored = extra
    config = engine_config(apply_flags(load_config(), args), "oss", 1)

    async def main(loop: Any) -> tuple[dict[str, int], list[Any], list[Any]]:
        async with app_client(config) as client:
            cards = (await client.get("/v1/models")).json()["data"]
            base = next(c["id"] for c in cards if c["parent"] is None)
            registry = client.app.state.gateway.loras  # type: ignore[attr-defined]
            ids = {name: registry.get(name).int_id for name in ("sql", "chat")}
            for model in ("chat", base):
                r = await client.post("/v1/completions", json={
                    "model": model, "prompt": LONG, "max_tokens": 2})
                assert r.status_code == 200
            await asyncio.sleep(0.01)  # the batch of the last step goes out
            (pub,) = client.app.state.kv_events.publishers  # type: ignore[attr-defined]
            raw = [msgspec.msgpack.decode(p) for _, p in pub.buffer]
            events = [e for _, p in pub.buffer for e in DECODE.decode(p).events
                      if isinstance(e, BlockStored)]
        return ids, raw, events

    ids, raw, events = run_app_virtual(main)
    assert ids["chat"] != ids["sql"] and min(ids.values()) >= 1
    lora_ids = {e.lora_id for e in events}
    assert lora_ids == {ids["chat"], None}  # chat's blocks, then the base model's own
    first = next(e for batch in raw for e in batch[1] if e[0] == "BlockStored")
    # vLLM's field order: tag, block_hashes, parent_block_hash, token_ids, block_size,
    # lora_id, medium
    assert first[5] == ids["chat"] and first[6] == "GPU" and first[4] == 16
