"""The batches service: ``Batches.submit``, the one path of both batch APIs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from fastmode.backends.batch_pool import BatchPool
from fastmode.backends.engine import Tier
from fastmode.gateway.batches.files import FileStore
from fastmode.gateway.batches.runner import Prepared, prepare, settle, timed
from fastmode.gateway.batches.store import Batch, BatchStore, Entry
from fastmode.gateway.errors import APIError
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.protocols import Protocol
from fastmode.gateway.values.ids import new_id

__all__ = ["Batches", "Prepared", "body_of"]
YIELD_EVERY = 16  # lines prepared between two turns of the event loop


class Batches:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.config = gateway.config.batches
        self.files = FileStore()
        self.store = BatchStore(gateway.state, self._publish)
        self._pools: dict[str, tuple[BatchPool, float]] = {}
        self.publishers: dict[str, Any] = {}  # kind -> results of a finished batch

    def pool(self, tier: Tier) -> tuple[BatchPool, float]:
        """The batch pool of a standard tier's deployment, and its price factor."""
        if tier.name not in self._pools:
            dep, cfg = tier.deployment, self.config
            # the largest batch the KV cache holds at the pool's contexts, at most max_batch
            fits = dep.placement.kv_capacity_tokens // (cfg.prompt_tokens + cfg.output_tokens)
            batch = max(dep.limits.max_batch, min(cfg.max_batch, fits))
            pool = BatchPool(dep.placement, batch, dep.limits.max_batched_tokens,
                             cfg.prompt_tokens, cfg.output_tokens, cfg.slots)
            factor = cfg.price_factor or pool.cost_per_token() / dep.cost_per_token
            self._pools[tier.name] = (pool, factor)
        return self._pools[tier.name]

    def factor(self, model: str) -> float:
        return self.pool(self.gateway.router.route(model, "standard").tier)[1]

    async def submit(self, kind: str, owner: str | None, endpoint: str,
                     lines: list[tuple[str, Protocol, Any]], headers: Mapping[str, str],
                     **extra: Any) -> Batch:
        """Answer and time every line; keep the batch until the pool is done with it. A line
        costs the mock model's ~1 ms: the loop lets other requests run every ``YIELD_EVERY``
        lines, so a 50,000-line batch never holds the server."""
        entries: list[Entry] = []
        groups: dict[str, list[Entry]] = {}
        for n, (custom_id, protocol, body) in enumerate(lines):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
            try:
                model = body.get("model") if isinstance(body, dict) else None
                factor = self.factor(str(model)) if model else 1.0
                prepared = prepare(self.gateway, protocol, body, headers, factor)
            except APIError as exc:
                entries.append(Entry(custom_id, None, (exc.status,
                                                       protocol.error_body(exc, new_id("req")))))
                continue
            entry = Entry(custom_id, prepared)
            entries.append(entry)
            standard = self.gateway.router.route(prepared.job.model, "standard").tier
            groups.setdefault(standard.name, []).append(entry)
        for name, group in groups.items():
            pool, _ = self.pool(self.gateway.spec.tiers[name])
            self._time(pool, group)
        prefix = "batch" if kind == "openai" else "msgbatch"  # the providers' id prefixes
        batch = Batch(new_id(prefix).replace("-", "_", 1), kind, owner,
                      endpoint, entries, self.config.time_scale,
                      self.config.completion_window_s, **extra)
        return self.store.add(batch)

    @staticmethod
    def _time(pool: BatchPool, group: list[Entry]) -> None:
        jobs = [e.prepared.job for e in group if e.prepared is not None]
        ends = pool.finish_times([(j.prompt_tokens, j.gen.output_tokens) for j in jobs])
        step = pool.step_seconds()
        for entry, job, end in zip(group, jobs, ends, strict=True):
            steps = job.gen.output_tokens + max(1, -(-job.prompt_tokens //
                                                     pool.max_batched_tokens))
            timed(job, end - steps * step, end, step)
            settle(job)
            entry.finish_s = end

    def _publish(self, batch: Batch) -> dict[str, Any]:
        publisher = self.publishers.get(batch.kind)
        return publisher(self, batch) if publisher is not None else {}

    async def close(self) -> None:
        await self.store.close()


def body_of(entry: Entry) -> tuple[int, dict[str, Any]]:
    """(status, body) of a line: the endpoint's response, or its error."""
    if entry.prepared is not None:
        return 200, entry.prepared.body()
    assert entry.error is not None
    return entry.error

