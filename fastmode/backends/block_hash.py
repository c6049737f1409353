"""vLLM's prefix-cache block hashes, so a replica's cache is the blocks a vLLM engine would hold.

vLLM cuts a prompt's token ids into blocks of ``block_size`` (16 by default) and names each full
block by a hash chained over its parent: ``hash((parent_hash, tuple(block_token_ids),
extra_keys))`` with the first block's parent ``NONE_HASH``, itself the hash of the seed (vLLM's
``PYTHONHASHSEED``). Two prompts share a block exactly when they agree on every token up to its
end. The hash function is a setting (vLLM's ``--prefix-caching-hash-algo``): ``sha256`` over
the pickled tuple, or ``sha256_cbor`` over its canonical CBOR (language-independent: a router
in Go can recompute it). KV events carry a block's hash as an integer, the low 64 bits of the
digest read big-endian (vLLM's default, ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``), and that
integer is what the cache keys its entries by.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import cbor2

from fastmode.backends.prefix_cache import PrefixKey

HashAlgo = Literal["sha256", "sha256_cbor"]
HASH_ALGOS: tuple[str, ...] = ("sha256", "sha256_cbor")
_LOW64 = (1 << 64) - 1


def _sha256(value: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(value: Any) -> bytes:
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def external(digest: bytes) -> int:
    """A block hash as KV events carry it: the digest's low 64 bits (big-endian)."""
    return int.from_bytes(digest, "big") & _LOW64


@dataclass(frozen=True)
class BlockHasher:
    """One engine's block size, hash function and seed."""

    block_size: int = 16
    algo: HashAlgo = "sha256"
    seed: str = "0"

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size: must be at least 1")
        if self.algo not in HASH_ALGOS:
            raise ValueError(f"hash algo: unknown {self.algo!r}; allowed: {', '.join(HASH_ALGOS)}")

    def _fn(self, value: Any) -> bytes:
        return _sha256_cbor(value) if self.algo == "sha256_cbor" else _sha256(value)

    @property
    def none_hash(self) -> bytes:
        return self._fn(self.seed)

    def hash_block(self, parent: bytes, token_ids: Sequence[int],
                   extra: tuple[Any, ...] | None = None) -> bytes:
        return self._fn((parent, tuple(token_ids), extra))

    def digests(self, token_ids: Sequence[int],
                extra: tuple[Any, ...] | None = None) -> list[bytes]:
        """The chained hash of every full block of ``token_ids``; ``extra``: vLLM's extra keys
        of every block (a LoRA request's ``(adapter name,)``: its KV differs from the base
        model's, so its blocks never match theirs)."""
        bs = self.block_size
        parent = self.none_hash
        out: list[bytes] = []
        for start in range(0, len(token_ids) - bs + 1, bs):
            parent = self.hash_block(parent, token_ids[start:start + bs], extra)
            out.append(parent)
        return out

    def key(self, token_ids: Sequence[int], extra: tuple[Any, ...] | None = None,
            lora_id: int | None = None) -> PrefixKey | None:
        """The prefix key of a prompt: a checkpoint at each full block, named by its hash; no
        time to live and no minimum (vLLM keeps blocks until memory is needed). ``lora_id``:
        the adapter's int id its stored blocks are reported under (KV events)."""
        hashes = tuple(external(d) for d in self.digests(token_ids, extra))
        if not hashes:
            return None
        n = len(hashes)
        bs = self.block_size
        return PrefixKey(tuple(range(bs, bs * n + 1, bs)), hashes, (True,) * n,
                         (math.inf,) * n, tokens=tuple(token_ids), block_size=bs,
                         lora_id=lora_id)
