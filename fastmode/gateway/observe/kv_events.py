"""KV-cache events over ZMQ, as vLLM publishes them, from each replica's blocks.

Each replica of a deployment with ``kv_events`` on (and its cache in blocks) gets a publisher:
a PUB socket sending multipart ``[topic, seq, payload]`` (``seq`` an 8-byte big-endian count
from 0, ``payload`` a msgpack ``KVEventBatch``: ``gateway.observe.kv_wire``), and, with a
``replay_endpoint``, a ROUTER socket answering a subscriber that missed batches: it sends
``[b"", start_seq]`` (8 bytes, big-endian) and gets every batch still buffered from there as
``[b"", seq, payload]``, then ``[b"", -1, b""]``. The events of one turn of the event loop go
out as one batch (vLLM sends one per engine step). Replica ``i`` of a process binds the
endpoint's port + ``i`` and stamps its batches with ``data_parallel_rank`` ``i`` when the
process runs several, as vLLM's data-parallel ranks do.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from typing import Any

import zmq
import zmq.asyncio

from fastmode.backends.config import KVEventsConfig
from fastmode.gateway.observe.kv_wire import (
    ENCODER,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
)

log = logging.getLogger("fastmode.kv_events")
END_SEQ = (-1).to_bytes(8, "big", signed=True)
MEDIUM = "GPU"


def offset_endpoint(endpoint: str, offset: int) -> str:
    """``endpoint`` with its TCP port moved by ``offset`` (other transports unchanged)."""
    if not offset:
        return endpoint
    m = re.fullmatch(r"(tcp://.*:)(\d+)", endpoint)
    if m is None:
        return f"{endpoint}_{offset}"  # ipc:// and inproc:// names: a suffix
    return f"{m.group(1)}{int(m.group(2)) + offset}"


class Publisher:
    """One replica's events: a ``backends.prefix_cache.CacheListener``."""

    def __init__(self, config: KVEventsConfig, rank: int | None, offset: int = 0) -> None:
        self.topic = config.topic.encode()
        self.rank = rank
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self.pending: list[Any] = []
        self.seq = 0
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = offset_endpoint(config.endpoint, offset)
        self._pub.bind(self.endpoint)
        self._actx: zmq.asyncio.Context | None = None
        self._replay: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self.replay_endpoint = None
        if config.replay_endpoint:
            self.replay_endpoint = offset_endpoint(config.replay_endpoint, offset)
            self._actx = zmq.asyncio.Context()
            self._replay = self._actx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(self.replay_endpoint)
            self._task = asyncio.get_running_loop().create_task(self._serve_replay())

    # -- CacheListener -----------------------------------------------------------------------

    def stored(self, hashes: list[int], parent: int | None, token_ids: list[int],
               block_size: int, lora_id: int | None = None) -> None:
        self._add(BlockStored(hashes, parent, token_ids, block_size, lora_id, MEDIUM))

    def removed(self, hashes: list[int]) -> None:
        self._add(BlockRemoved(hashes, MEDIUM))

    def cleared(self) -> None:
        self._add(AllBlocksCleared())

    # -- sending -------------------------------------------------------------------------------

    def _add(self, event: Any) -> None:
        first = not self.pending
        self.pending.append(event)
        if first:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a test driving the cache directly): send now
                self.flush()

    def flush(self) -> None:
        if not self.pending or self._pub.closed:
            return
        batch = EventBatch(time.time(), self.pending, self.rank)
        self.pending = []
        payload = ENCODER.encode(batch)
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        try:
            self._pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload), zmq.NOBLOCK)
        except zmq.Again:  # past the high-water mark: dropped, as ZMQ's PUB drops (replayable)
            pass

    async def _serve_replay(self) -> None:
        sock = self._replay
        assert sock is not None
        while True:
            try:
                frames = await sock.recv_multipart()
            except (asyncio.CancelledError, zmq.ContextTerminated):
                return
            if len(frames) != 3 or len(frames[2]) != 8:
                log.warning("kv events replay: a malformed request (%d frames)", len(frames))
                continue
            client, _, start = frames
            first = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= first:
                    await sock.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
            await sock.send_multipart((client, b"", END_SEQ, b""))

    async def close(self) -> None:
        self.flush()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._replay is not None:
            self._replay.close()
        self._pub.close()
        self._ctx.term()
        if self._actx is not None:
            self._actx.term()


class KVEvents:
    """The publishers of a gateway's (an engine's) replicas."""

    def __init__(self) -> None:
        self.publishers: list[Publisher] = []

    def install(self, gateway: Any) -> None:
        for name, spec in gateway.spec.deployments.items():
            cfg: KVEventsConfig | None = gateway.config.deployments[name].kv_events
            if cfg is None or not cfg.on:
                continue
            if spec.kv_blocks is None:
                raise ValueError(f"deployments.{name}.kv_events: needs the cache in blocks "
                                 "(prefix_caching and prefix_cache_blocks = true)")
            replicas = gateway.deployments[name].replicas
            for i, replica in enumerate(replicas):
                cache = replica.scheduler.cache
                if cache is None:
                    continue
                pub = Publisher(cfg, i if len(replicas) > 1 else None, i)
                cache.listener = pub
                self.publishers.append(pub)

    async def stop(self) -> None:
        for pub in self.publishers:
            await pub.close()
        self.publishers = []
