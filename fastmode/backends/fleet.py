"""The fleet: the nodes the pools share, and how replicas are assigned to pools.

A fleet is groups of nodes, one per hardware kind (``chips_per_node`` chips at an hourly price);
each deployment ("pool") draws its replicas from the group of its hardware, a replica taking
``ceil(chips / chips_per_node)`` nodes. Three policies:

- ``static``: each pool keeps the replicas it starts with (the behaviour without a fleet);
- ``proportional``: the provider moves replicas to where the demand is. Every ``interval_s``
  the autoscaler samples each pool's demand in batch slots (our running and waiting requests
  plus the other tenants' running and waiting ones, smoothed), turns it into replicas needed at
  ``target_utilization``, and on a fixed fleet moves a replica from the pool with the most slack
  to the most loaded one when that narrows the gap (so on a fixed fleet a growing fast pool
  takes its replicas from somebody's bus), or on an elastic fleet (``max_count > count``) rents
  and releases nodes instead. A moved replica stops taking requests at once, finishes its own,
  and serves its new pool ``reaction_s`` later (drain, reconfigure, load weights);
- ``priority``: one shared pool (static) whose scheduler admits higher-priority tiers first,
  as OpenAI's "priority processing" does (``tiers.NAME.priority``).

``Fleet`` is clock-free, like the scheduler: a driver calls ``due(now)`` when ``next_time`` has
come and gives it a ``FleetHost`` (its replicas, and how to add or retire one); both drivers do
the same, so a fleet behaves the same in ``simulate`` and behind ``serve``. It also keeps the
books: node-hours per group (a fixed fleet pays for all its nodes, an elastic one for those it
rents), replica-seconds per pool and the moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from fastmode.backends.tenants import TenantDemand

MAX_MOVES = 4  # replicas moved per autoscaler tick at most (per node group)
MARGIN = 0.15  # a move must narrow the utilisation gap by more than this (noise: ~0.05)
SHRINK_SLACK = 0.3  # elastic: release a replica only if one fewer still leaves this much slack
SMOOTHING = 0.3  # weight of the newest demand sample (an EWMA over ~1 minute)


@dataclass(frozen=True)
class NodeGroup:
    name: str
    hardware: str
    chips_per_node: int
    count: int  # nodes at start; a fixed fleet pays for them all, always
    max_count: int  # > count: elastic
    price_per_hour_usd: float  # one node

    @property
    def elastic(self) -> bool:
        return self.max_count > self.count


@dataclass(frozen=True)
class PoolSpec:
    deployment: str
    group: str
    nodes_per_replica: int
    replicas: int  # at start
    min_replicas: int
    max_replicas: int | None
    max_batch: int
    tenants: TenantDemand | None = None


@dataclass(frozen=True)
class FleetSpec:
    policy: str
    groups: dict[str, NodeGroup]
    pools: dict[str, PoolSpec]
    interval_s: float = 15.0
    reaction_s: float = 60.0
    target_utilization: float = 0.9
    tenant_tick_s: float = 2.0
    seed: int = 1
    implicit: bool = False  # no [fleet] section: every deployment's own replicas, static

    @property
    def autoscaled(self) -> bool:
        return self.policy == "proportional"

    def variant(self, mode: str | None = None, seed: int | None = None) -> FleetSpec:
        """The same fleet made ``fixed`` (nodes = count) or ``elastic`` (the autoscaler may rent
        up to ``max_count``, or twice ``count`` when the config sets none)."""
        groups = dict(self.groups)
        if mode == "fixed":
            groups = {n: replace(g, max_count=g.count) for n, g in groups.items()}
        elif mode == "elastic":
            groups = {
                n: replace(g, max_count=g.max_count if g.elastic else 2 * g.count)
                for n, g in groups.items()
            }
        elif mode is not None:
            raise ValueError(f"fleet mode: unknown {mode!r}; allowed: fixed, elastic")
        return replace(self, groups=groups, seed=self.seed if seed is None else seed)


class FleetHost(Protocol):
    """What a driver offers the fleet: its replicas and how to add or retire one."""

    by_deployment: dict[str, list[Any]]
    draining: list[Any]

    def add_replica(self, deployment: str, now: float, warm: bool) -> Any: ...

    def retire_replica(self, replica: Any, now: float) -> None: ...


@dataclass
class _Books:
    node_s: dict[str, float] = field(default_factory=dict)  # per group
    nodes_max: dict[str, int] = field(default_factory=dict)
    replica_s: dict[str, float] = field(default_factory=dict)  # per pool, active replicas
    replicas_min: dict[str, int] = field(default_factory=dict)
    replicas_max: dict[str, int] = field(default_factory=dict)
    moves_in: dict[str, int] = field(default_factory=dict)
    moves_out: dict[str, int] = field(default_factory=dict)


class Fleet:
    """The fleet's state and its autoscaler (see the module doc)."""

    def __init__(self, spec: FleetSpec, host: FleetHost, start: float = 0.0) -> None:
        self.spec = spec
        self.host = host
        self.start = start
        self._last = start
        self.pending: list[tuple[float, str]] = []  # (ready at, pool)
        self.used = {g: 0 for g in spec.groups}  # nodes held by replicas (incl. pending)
        for p in spec.pools.values():
            self.used[p.group] += p.nodes_per_replica * p.replicas
        self.demand: dict[str, float] = {}
        self._offered: dict[str, float] = {}  # per replica: tokens offered by the last turn
        self._sampled: dict[str, float] = {}  # per pool: time of the last sample
        self.next_tick = start + spec.interval_s if spec.autoscaled else math.inf
        self.next_time = self.next_tick
        b = self.books = _Books()
        for g in spec.groups:
            b.node_s[g] = 0.0
            b.nodes_max[g] = self.paid(g)
        for name, p in spec.pools.items():
            b.replica_s[name] = 0.0
            b.replicas_min[name] = b.replicas_max[name] = p.replicas
            b.moves_in[name] = b.moves_out[name] = 0

    # -- accounting -----------------------------------------------------------------------

    def paid(self, group: str) -> int:
        """Nodes paid for now: all of a fixed group; those held by replicas in an elastic one."""
        g = self.spec.groups[group]
        return self.used[group] if g.elastic else g.count

    def _account(self, now: float) -> None:
        dt = now - self._last
        if dt <= 0:
            return
        b = self.books
        for g in self.spec.groups:
            b.node_s[g] += self.paid(g) * dt
        for name in self.spec.pools:
            b.replica_s[name] += len(self.host.by_deployment[name]) * dt
        self._last = now

    def _seen(self, pool: str) -> None:
        b = self.books
        n = len(self.host.by_deployment[pool])
        b.replicas_min[pool] = min(b.replicas_min[pool], n)
        b.replicas_max[pool] = max(b.replicas_max[pool], n)
        g = self.spec.pools[pool].group
        b.nodes_max[g] = max(b.nodes_max[g], self.paid(g))

    # -- the clock's side -----------------------------------------------------------------

    def due(self, now: float) -> None:
        """Bring replicas whose move is done into service; run the autoscaler if its turn."""
        self._account(now)
        ready = [p for p in self.pending if p[0] <= now]
        if ready:
            self.pending = [p for p in self.pending if p[0] > now]
            for _, pool in ready:
                self.host.add_replica(pool, now, False)
                self.books.moves_in[pool] += 1
                self._seen(pool)
        if now >= self.next_tick:
            self._autoscale(now)
            while self.next_tick <= now:
                self.next_tick += self.spec.interval_s
        self.next_time = min([self.next_tick, *(p[0] for p in self.pending)])

    def drained(self, replica: Any, now: float) -> None:
        """A retired replica finished its last request: an elastic group stops paying for it."""
        self._account(now)
        pool = self.spec.pools[replica.deployment]
        if self.spec.groups[pool.group].elastic:
            self.used[pool.group] -= pool.nodes_per_replica

    # -- the autoscaler -------------------------------------------------------------------

    def _sample(self, pool: str, now: float) -> float:
        """Batch slots the pool's offered load needs: the output tokens per second of every
        request offered to it since the last turn (ours and the other tenants', refused ones
        included) times the seconds a slot takes per token now. Offered load, not the queue:
        a backlog is not demand that grows, and counting it would make an overloaded pool look
        ever hungrier."""
        host = self.host
        replicas = [*host.by_deployment[pool], *(d for d in host.draining if d.deployment == pool)]
        seen = self._offered
        tokens, step = 0.0, 0.0
        for r in replicas:
            if r.tenants is not None and not r.scheduler.has_work:
                r.tenants.advance(now)  # an idle replica's ticks run lazily: bring them up
            total = r.offered + (r.tenants.offered_tokens if r.tenants is not None else 0.0)
            tokens += total - seen.get(r.name, 0.0)
            seen[r.name] = total
            step += r.scheduler.decode_estimate()
        span = now - self._sampled.get(pool, self.start)
        self._sampled[pool] = now
        if span <= 0 or not replicas:
            return 0.0
        return tokens / span * (step / len(replicas))

    def _need(self, pool: str) -> float:
        p = self.spec.pools[pool]
        return self.demand[pool] / (p.max_batch * self.spec.target_utilization)

    def _current(self, pool: str) -> int:
        return len(self.host.by_deployment[pool]) + sum(1 for _, q in self.pending if q == pool)

    def _autoscale(self, now: float) -> None:
        for name in self.spec.pools:
            seats = self._sample(name, now)
            old = self.demand.get(name)
            self.demand[name] = seats if old is None else (
                SMOOTHING * seats + (1 - SMOOTHING) * old
            )
        for gname, g in self.spec.groups.items():
            pools = [n for n, p in self.spec.pools.items() if p.group == gname]
            if not pools:
                continue
            if g.elastic:
                self._elastic(now, g, pools)
            else:
                self._balance(now, g, pools)

    def _room(self, pool: str) -> bool:
        cap = self.spec.pools[pool].max_replicas
        return cap is None or self._current(pool) < cap

    def _add(self, now: float, pool: str) -> None:
        self.pending.append((now + self.spec.reaction_s, pool))
        self.used[self.spec.pools[pool].group] += self.spec.pools[pool].nodes_per_replica

    def _retire(self, now: float, pool: str) -> None:
        """The least-loaded active replica of ``pool`` leaves it (drains its own requests)."""
        replica = min(self.host.by_deployment[pool], key=lambda r: r.load)
        self.host.retire_replica(replica, now)
        self.books.moves_out[pool] += 1
        self._seen(pool)

    def _balance(self, now: float, g: NodeGroup, pools: list[str]) -> None:
        """A fixed group: free nodes to the most loaded pool, then moves that narrow the gap."""
        specs = self.spec.pools

        def util(p: str, delta: int = 0) -> float:
            n = self._current(p) + delta
            return self._need(p) / n if n > 0 else math.inf

        for _ in range(MAX_MOVES):
            ranked = sorted((p for p in pools if self._room(p)), key=util, reverse=True)
            if not ranked:
                return
            free = g.count - self.used[g.name]
            fits = [p for p in ranked if specs[p].nodes_per_replica <= free]
            if fits:
                self._add(now, fits[0])
                continue
            b = ranked[0]
            if util(b) <= 1.0:
                return  # nobody is short of replicas
            donors = [
                p for p in pools
                if p != b and len(self.host.by_deployment[p]) > specs[p].min_replicas
            ]
            if not donors:
                return
            a = min(donors, key=lambda p: util(p, -1))
            if util(a, -1) + MARGIN >= util(b):
                return
            self._retire(now, a)
            self.used[g.name] -= specs[a].nodes_per_replica
            if specs[b].nodes_per_replica <= g.count - self.used[g.name]:
                self._add(now, b)

    def _elastic(self, now: float, g: NodeGroup, pools: list[str]) -> None:
        """An elastic group: rent for pools short of replicas, release what is idle."""
        specs = self.spec.pools
        for p in pools:
            need = self._need(p)
            cur = self._current(p)
            want = max(specs[p].min_replicas, math.ceil(need))
            while cur < want and self._room(p) and (
                self.used[g.name] + specs[p].nodes_per_replica <= g.max_count
            ):
                self._add(now, p)
                cur += 1
            active = len(self.host.by_deployment[p])
            if cur == active and active > specs[p].min_replicas and need <= (
                cur - 1 - SHRINK_SLACK
            ):
                self._retire(now, p)

    # -- the books ------------------------------------------------------------------------

    def report(self, now: float) -> dict[str, Any]:
        """Node-hours and the provider's cost per group, replicas per pool, over the run."""
        self._account(now)
        b = self.books
        span = max(now - self.start, 1e-12)
        nodes = {}
        for name, g in self.spec.groups.items():
            hours = b.node_s[name] / 3600.0
            nodes[name] = {
                "hardware": g.hardware,
                "chips_per_node": g.chips_per_node,
                "count": g.count,
                "max_count": g.max_count,
                "mean": b.node_s[name] / span,
                "max": b.nodes_max[name],
                "node_hours": hours,
                "cost_usd": hours * g.price_per_hour_usd,
            }
        pools = {
            name: {
                "group": p.group,
                "replicas_start": p.replicas,
                "replicas_mean": b.replica_s[name] / span,
                "replicas_min": b.replicas_min[name],
                "replicas_max": b.replicas_max[name],
                "replicas_end": len(self.host.by_deployment[name]),
                "moves_in": b.moves_in[name],
                "moves_out": b.moves_out[name],
            }
            for name, p in self.spec.pools.items()
        }
        return {
            "policy": self.spec.policy,
            "elastic": any(g.elastic for g in self.spec.groups.values()),
            "nodes": nodes,
            "pools": pools,
            "node_hours": sum(n["node_hours"] for n in nodes.values()),
            "cost_usd": sum(n["cost_usd"] for n in nodes.values()),
        }

    def snapshot(self) -> dict[str, Any]:
        """The assignment now (for a live view): replicas per pool, moves under way, nodes."""
        return {
            "policy": self.spec.policy,
            "pools": {
                name: {
                    "active": len(self.host.by_deployment[name]),
                    "pending": sum(1 for _, q in self.pending if q == name),
                    "draining": sum(1 for d in self.host.draining if d.deployment == name),
                    "group": p.group,
                }
                for name, p in self.spec.pools.items()
            },
            "nodes": {
                name: {"paid": self.paid(name), "used": self.used[name], "count": g.count,
                       "max_count": g.max_count, "price_per_hour_usd": g.price_per_hour_usd}
                for name, g in self.spec.groups.items()
            },
        }


def build_fleet(
    fleet: Any, deployments: Mapping[str, Any], tenants: Mapping[str, TenantDemand],
    hardware_price: Mapping[str, float],
) -> FleetSpec:
    """The ``FleetSpec`` of a ``FleetConfig`` (or None: each deployment's own chips, static).

    ``deployments`` maps names to (``DeploymentConfig``, ``DeploymentSpec``) pairs;
    ``hardware_price`` the hourly price of one chip per hardware name.
    """
    if fleet is None:
        chips: dict[str, int] = {}
        for cfg, _ in deployments.values():
            chips[cfg.hardware] = chips.get(cfg.hardware, 0) + cfg.replica_chips * cfg.replicas
        groups = {
            hw: NodeGroup(hw, hw, 1, n, n, hardware_price[hw]) for hw, n in chips.items()
        }
        pools = {
            name: PoolSpec(name, cfg.hardware, cfg.replica_chips, cfg.replicas, cfg.replicas,
                           cfg.replicas, spec.limits.max_batch, tenants.get(name))
            for name, (cfg, spec) in deployments.items()
        }
        return FleetSpec("static", groups, pools, implicit=True)
    groups = {}
    by_hw = {}
    for gname, g in fleet.nodes.items():
        price = g.price_per_hour_usd
        if price is None:
            price = g.chips_per_node * hardware_price[g.hardware]
        max_count = g.count if g.max_count is None else g.max_count
        groups[gname] = NodeGroup(gname, g.hardware, g.chips_per_node, g.count, max_count, price)
        by_hw[g.hardware] = gname
    pools = {}
    for name, (cfg, spec) in deployments.items():
        gname = by_hw[cfg.hardware]
        per = -(-cfg.replica_chips // groups[gname].chips_per_node)
        pools[name] = PoolSpec(name, gname, per, cfg.replicas, cfg.min_replicas,
                               cfg.max_replicas, spec.limits.max_batch, tenants.get(name))
    return FleetSpec(fleet.policy, groups, pools, fleet.interval_s, fleet.reaction_s,
                     fleet.target_utilization, fleet.tenant_tick_s, fleet.seed)
