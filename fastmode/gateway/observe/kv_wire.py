"""vLLM's KV-event wire format, as KV-aware routers decode it.

A batch is a msgpack array ``[ts, [event, ...], data_parallel_rank]`` (msgspec writes every
field of an array-like struct, a default too: the rank is nil when there is none); each event an array whose first element names its kind (msgspec's
tagged union, the tag being the class name): ``["BlockStored", block_hashes,
parent_block_hash, token_ids, block_size, lora_id, medium]``, ``["BlockRemoved",
block_hashes, medium]``, ``["AllBlocksCleared"]``. These are the field order and types of
``vllm/distributed/kv_events.py`` and of llm-d's kv-cache manager decoder (``BlockHashes``,
``ParentBlockHash``, ``TokenIds []uint32``, ``BlockSize``, ``LoraID``, ``Medium``).
"""

from __future__ import annotations

import msgspec


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """A change to an engine's cached blocks (the tag is the subclass's name)."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


KVEventBatch = EventBatch
ENCODER = msgspec.msgpack.Encoder()
DECODER = msgspec.msgpack.Decoder(EventBatch)
