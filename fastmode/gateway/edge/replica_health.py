"""Replica failures as the gateway sees them: counted, their turns answered, shown in /readyz.

The engine's ``Supervisor`` (``backends.drivers.supervisor``) notices a replica that stopped
stepping (its task raised, was cancelled, or holds work without stepping), fails over the
requests that have no token yet and restarts it. What is left to the gateway:

* ``fastmode_replica_failures_total{deployment,replica,kind}`` and
  ``fastmode_replica_failed_over_total{deployment}`` count it; ``fastmode_replica_steps_total``
  and ``fastmode_replica_healthy`` (read at scrape time) let a scraper see a replica stand still;
* the turns the failure ended get a clear answer in their own protocol's format (a 503
  ``replica_failed`` body, or the error event mid-stream), billed for the tokens sent, through
  the same ``Turn.end_with`` a graceful shutdown uses;
* ``/readyz`` names the replicas out of routing and those that failed lately (``readiness``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fastmode.backends.drivers import ReplicaFailure
from fastmode.gateway.errors import APIError
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.state import FAILED

RECENT_S = 300.0  # /readyz lists a replica's failure this long after it


def replica_failed(name: str) -> APIError:
    return APIError(503, f"The engine replica serving this request failed ({name}); retry "
                    "the request.", code="replica_failed", headers={"retry-after": "1"})


class ReplicaHealth:
    """The gateway's side of replica supervision (see the module doc)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        registry = gateway.metrics.registry
        self.failures = Counter(
            "fastmode_replica_failures", "Engine replicas that stopped stepping (exception: its "
            "task raised; cancelled: its task was cancelled; stalled: work but no step), each "
            "then restarted", ["deployment", "replica", "kind"], registry=registry)
        self.failed_over = Counter(
            "fastmode_replica_failed_over", "Requests without a token yet moved off a failed "
            "replica to another", ["deployment"], registry=registry)
        registry.register(_Collector(gateway))

    def attach(self) -> None:
        """After each ``Gateway.start`` (a new engine): its failures are reported here."""
        if self.gateway.fleet is not None:
            self.gateway.fleet.driver.supervisor.on_failure = self.failed

    def failed(self, failure: ReplicaFailure) -> None:
        """The supervisor's report: count it and end the turns it ended."""
        self.failures.labels(failure.deployment, failure.replica, failure.kind).inc()
        if failure.failed_over:
            self.failed_over.labels(failure.deployment).inc(failure.failed_over)
        ended = {id(s) for s in failure.ended}
        if not ended:
            return
        error = replica_failed(failure.replica)
        for turn in list(self.gateway.turns):
            job = turn.job
            if job is not None and id(job.stream) in ended:
                turn.end_with(error, 503, FAILED, "replica_failed")

    def readiness(self) -> dict[str, Any]:
        """Replicas out of routing now, and those that failed in the last ``RECENT_S``."""
        fleet = self.gateway.fleet
        if fleet is None:
            return {}
        sup = fleet.driver.supervisor
        now = fleet.driver.now
        out: dict[str, Any] = {}
        if sup.unhealthy:
            out["unhealthy_replicas"] = {
                name: {"deployment": f.deployment, "kind": f.kind, "detail": f.detail,
                       "failures": f.failures, "restart_in_s": round(f.restart_at - now, 1)}
                for name, f in sup.unhealthy.items()}
        recent = {name: {"kind": f.kind, "detail": f.detail, "ago_s": round(now - f.at, 1),
                         "failures": f.failures, "failed_over": f.failed_over,
                         "ended": len(f.ended)}
                  for name, f in sup.recent.items() if now - f.at <= RECENT_S}
        if recent:
            out["recent_replica_failures"] = recent
        return out


class _Collector:
    """Per replica, read at scrape time: its steps (a counter that stands still when the
    replica does) and whether it is in routing."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        labels = ["deployment", "replica"]
        steps = CounterMetricFamily("fastmode_replica_steps", "Engine steps a replica ran",
                                    labels=labels)
        healthy = GaugeMetricFamily("fastmode_replica_healthy", "1 while a replica is in "
                                    "routing, 0 while a failed one waits to restart",
                                    labels=labels)
        for name, dep in self.gateway.deployments.items():
            for r in dep.replicas:
                steps.add_metric([name, r.name], r.steps)
                healthy.add_metric([name, r.name], 1 if r.healthy else 0)
        yield steps
        yield healthy
