"""Which data-parallel rank of an engine takes a request: vLLM's internal load balancer.

``fastmode engine --data-parallel-size N`` runs N ranks in one process, each its own scheduler
(its own batch, KV cache and prefix cache), as ``vllm serve --data-parallel-size N`` does. vLLM's
API server sends a request to the rank named by its ``X-data-parallel-rank`` header (read
case-insensitively; a rank outside ``[0, N)`` is a 400 here), else to the rank with the lowest
``4 x waiting + running`` (``DPLBAsyncMPClient``; the first on ties): load only, the prefix
cache plays no part (a KV-aware router in front picks the rank with the header). vLLM reads the
counts from stats at most 100 ms old plus its own assignments since; fastmode reads them now.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from fastmode.backends.drivers import Replica
from fastmode.gateway.errors import bad_request

HEADER = "x-data-parallel-rank"
R = TypeVar("R", bound=Replica)


def rank_of(raw: str | None, ranks: int) -> int | None:
    """The header's rank, checked against the engine's ``ranks``."""
    if raw is None:
        return None
    try:
        rank = int(raw.strip())
    except ValueError:
        rank = -1
    if not 0 <= rank < ranks:
        raise bad_request(f"X-data-parallel-rank: {raw!r} is not a rank of this engine "
                          f"(0 to {ranks - 1}).", param="X-data-parallel-rank")
    return rank


def pick(replicas: Sequence[R], raw_rank: str | None) -> R:
    """The rank a request goes to (``replicas`` in rank order; a failed one only when all
    are)."""
    rank = rank_of(raw_rank, len(replicas))
    if rank is not None:
        return replicas[rank]
    live = [r for r in replicas if r.healthy] or list(replicas)
    return min(live, key=lambda r: 4 * len(r.scheduler.waiting) + r.scheduler.running)
