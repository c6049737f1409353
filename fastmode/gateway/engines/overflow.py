"""What happens when a tier cannot take a request: the fast pool full, or the queue too long.

``server.fast_overflow``: ``reject`` answers 429 (as Anthropic's fast mode does when its pool is
busy); ``downgrade`` serves the request on the standard tier and bills it there (the response
says so in ``x-fastmode-requested-tier``). A queue that is full, or whose modeled wait is over
``server.max_queue_wait_s``, is 503 ``server_is_overloaded`` (or 429, per
``server.overload_status``): the request is refused at once instead of waiting longer than a
client would.

``retry-after`` is not a constant: ``QueueModel`` plays the replica's queue forward from the
scheduler's public state — when each running sequence frees its slot (its remaining tokens),
then each waiting one in FCFS order — at the replica's last step time, which gives both the
modeled wait of a new request and when a retry would be admitted within the bound. A pool that
is full (every waiting queue at its bound) takes a request again when its first running
sequence finishes: ``until_slot_frees`` asks the backends for that modeled time
(``backends.free_slot``: remaining tokens and prompt chunks times each step's modeled
duration, valid before the first step too, when a burst fills the pool), so a client that
retries at ``retry-after`` finds the slot, and one that retries earlier would not have.
"""

from __future__ import annotations

import heapq
import math

from fastmode.backends.drivers import PoolHandle
from fastmode.backends.free_slot import free_slot_in
from fastmode.backends.scheduler import Scheduler
from fastmode.backends.tenants import TenantLoad
from fastmode.gateway.config import ServerConfig
from fastmode.gateway.errors import APIError, retry_headers

MIN_RETRY_S = 0.05


class QueueModel:
    """The modeled queue wait of a new request on a replica, in steps times the step time.

    The play-forward is cached per replica and step: a submission within the same step only
    pushes one more sequence (O(log slots)); a new step or a cancellation starts over.
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[int, int, list[int], tuple[int, int]]] = {}

    def wait_steps(self, sched: Scheduler, relief: tuple[int, int] = (0, 0)
                   ) -> tuple[int, int]:
        """(steps until a new request is admitted, steps until the next slot frees).
        ``relief``: (steps, slots): slots the other tenants hold now beyond their mean load,
        free for our queue from that step on (the module's ``relief``)."""
        free = sched.limits.max_batch - sched.background.seqs - sched.running
        waiting = sched.waiting
        if len(waiting) < free:
            return 0, 0
        key = id(sched)
        cached = self._cache.get(key)
        if (cached is not None and cached[0] == sched.step_index and cached[1] <= len(waiting)
                and cached[3] == relief):
            _, done, heap, _ = cached
        else:
            done, heap = 0, self._slots(sched, free) + [relief[0]] * relief[1]
            heapq.heapify(heap)
            heap = heap or [0]
        budget = max(1, sched.limits.max_batched_tokens)
        for seq in list(waiting)[done:]:  # FCFS: each waiting sequence takes the next slot
            t = heapq.heappop(heap)
            prefill = math.ceil(max(1, seq.prompt_tokens - seq.cached_tokens) / budget)
            heapq.heappush(heap, t + prefill + seq.output_tokens)
        self._cache[key] = (sched.step_index, len(waiting), heap, relief)
        return heap[0], self._first_free(sched)

    @staticmethod
    def _slots(sched: Scheduler, free: int) -> list[int]:
        step = sched.step_index
        heap = [0] * max(0, free)
        for seq in sched.decoding.values():
            heap.append(max(0, seq.output_tokens - seq.tokens_after(step)))
        budget = max(1, sched.limits.max_batched_tokens)
        for seq in sched.prefilling:
            heap.append(math.ceil(max(1, seq.prompt_tokens - seq.prefilled) / budget)
                        + seq.output_tokens)
        return heap

    @staticmethod
    def _first_free(sched: Scheduler) -> int:
        step = sched.step_index
        left = [max(0, s.output_tokens - s.tokens_after(step)) for s in sched.decoding.values()]
        return min(left, default=1)

    def forget(self, sched: Scheduler) -> None:
        self._cache.pop(id(sched), None)


def relief(tenants: TenantLoad, now: float, step_s: float) -> tuple[int, int]:
    """What a queue of ours can count on at the other tenants' next tick: (steps of ``step_s``
    until it, the seats they hold now above their mean). Their seats are fixed from one tick to
    the next, so a burst of theirs (a backlog admitted at one tick, after our requests had the
    batch) holds the batch until the next tick only, which shares the free slots out again in
    proportion to who waits. A queue model that kept those seats taken forever stated a wait
    many times what our requests then waited, and refused them. (0, 0) when they hold no more
    than their mean."""
    excess = tenants.seats - int(round(tenants.mean_seats))
    if excess <= 0 or step_s <= 0 or not math.isfinite(tenants.next_tick):
        return 0, 0
    return max(0, math.ceil((tenants.next_tick - now) / step_s)), excess


def until_slot_frees(dep: PoolHandle) -> float:
    """``retry-after`` of a full pool: seconds until any of its replicas takes one more request
    (modeled, ``backends.free_slot``), at least ``MIN_RETRY_S``."""
    return max(MIN_RETRY_S, free_slot_in((r.scheduler for r in dep.replicas), dep.driver.now))


def fast_full(tier: str, server: ServerConfig, retry_s: float | None = None) -> APIError:
    return APIError(
        429,
        f"The {tier} tier is at capacity. Retry shortly or use the standard tier.",
        code="rate_limit_exceeded",
        type="requests",
        headers=retry_headers(server.retry_after_s if retry_s is None else retry_s),
    )


def overloaded(server: ServerConfig, retry_s: float | None = None,
               wait_s: float | None = None, queue: tuple[int, int] | None = None) -> APIError:
    """The refusal in words: which bound, and for a full queue who holds its places (the other
    tenants queue for the same engine, so their requests can fill it while ours are few)."""
    status = server.overload_status
    if wait_s is not None:
        why = (f"the modeled wait in the queue is {wait_s:.1f} s, over the "
               f"{server.max_queue_wait_s:g} s bound")
    elif queue is not None:
        ours, others = queue
        why = (f"the engine's waiting queue is full ({ours} of this gateway's requests and "
               f"{others} of the other tenants' wait)")
    else:
        why = "the engine's waiting queue is full"
    return APIError(
        status,
        f"The server is overloaded: {why}. Retry shortly.",
        code="server_is_overloaded" if status == 503 else "rate_limit_exceeded",
        type="service_unavailable_error" if status == 503 else "requests",
        headers=retry_headers(server.retry_after_s if retry_s is None else
                              max(MIN_RETRY_S, retry_s)),
    )
