"""Liveness (``/healthz``) and readiness (``/readyz``).

``/healthz`` answers 200 while the process serves HTTP: it is what a supervisor restarts on.
``/readyz`` says, per tier, whether a new request would be served now: a local tier is not
ready when the least-loaded replica's queue is full or its modeled wait is over
``server.max_queue_wait_s``, or when every replica of its deployment failed and waits to
restart; a remote tier when no upstream is in rotation. It answers 503 when the gateway is
shutting down or no tier can serve (a load balancer should stop sending), and 200 otherwise,
with the tiers that cannot serve named in the body, and ``"degraded"`` with the replicas out of
routing (``unhealthy_replicas``) and those that failed lately (``recent_replica_failures``,
``gateway.edge.replica_health``).

vLLM's probe surface, answered as vLLM answers it, because load generators and orchestrators
probe it before they start (guidellm validates its backend with ``GET /health`` and stops on
anything but a 2xx): ``GET /health`` is 200 with an empty body (503 once a graceful shutdown
began, as vLLM answers when its engine is gone); ``GET``/``POST /ping`` (SageMaker's) the
same; ``GET /version`` ``{"version": ...}`` (fastmode's own); ``GET /load``
``{"server_load": N}``, the turns in flight. Like vLLM's, none needs an API key.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from fastapi import FastAPI
from starlette.responses import Response

from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.pipeline.admission import Gateway


def tier_readiness(gateway: Gateway, remote: Any) -> dict[str, dict[str, Any]]:
    server = gateway.config.server
    remote_tiers = remote.readiness().get("tiers", {}) if remote is not None and getattr(
        remote, "pools", None) else {}
    out: dict[str, dict[str, Any]] = {}
    for name, tier in gateway.spec.tiers.items():
        if name in remote_tiers:
            up = remote_tiers[name].get("in_rotation", 0)
            out[name] = {"ready": up > 0, "upstreams_in_rotation": up}
            if not up:
                out[name]["reason"] = "no upstream in rotation (engine down)"
            continue
        dep = gateway.deployments.get(tier.deployment.name)
        if dep is None:
            out[name] = {"ready": False, "reason": "not started"}
            continue
        replica = dep.choose()  # the replica a new request would go to
        down = [r.name for r in dep.replicas if not r.healthy]
        if down and len(down) == len(dep.replicas):
            out[name] = {"ready": False, "unhealthy_replicas": down,
                         "reason": "every replica failed and waits to restart"}
            continue
        sched = replica.scheduler
        waiting = len(sched.waiting)
        others = sched.queued_elsewhere  # the other tenants' requests queue for it too
        free = sched.limits.max_batch - sched.background.seqs - sched.running
        wait = gateway.modeled_wait(replica)
        entry: dict[str, Any] = {"ready": True, "waiting": waiting, "waiting_others": others,
                                 "queue_wait_s": round(wait, 3)}
        if down:
            entry["unhealthy_replicas"] = down
        if waiting + others >= sched.limits.max_waiting + max(0, free):
            entry.update(ready=False, reason=f"queue full ({waiting} of ours, {others} of the "
                         "other tenants')")
        elif wait > server.max_queue_wait_s:
            entry.update(ready=False, reason=f"modeled queue wait {wait:.1f} s over the bound")
        out[name] = entry
    return out


def version() -> str:
    """fastmode's version as installed (the source tree's when it is not installed)."""
    try:
        return metadata.version("fastmode")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def add_routes(app: FastAPI, gateway: Gateway) -> None:
    async def health() -> Response:
        return Response(status_code=503 if gateway.draining else 200)

    app.add_api_route("/health", health, methods=["GET"])
    for method in ("GET", "POST"):  # a route each: one operationId each in /openapi.json
        app.add_api_route("/ping", health, methods=[method])

    @app.get("/version")
    async def version_route() -> Response:
        return json_response({"version": version()})

    @app.get("/load")
    async def load() -> Response:
        return json_response({"server_load": len(gateway.turns)})

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response({"status": "ok", "tiers": list(gateway.spec.tiers)})

    @app.get("/readyz")
    async def readyz() -> Response:
        tiers = tier_readiness(gateway, getattr(app.state, "remote", None))
        health = getattr(app.state, "replica_health", None)
        replicas = health.readiness() if health is not None else {}
        if gateway.draining:
            return json_response({"status": "shutting_down", "tiers": tiers, **replicas}, 503)
        ready = [t for t in tiers.values() if t["ready"]]
        status = ("ok" if len(ready) == len(tiers) and "unhealthy_replicas" not in replicas
                  else "degraded" if ready else "unavailable")
        return json_response({"status": status, "tiers": tiers, **replicas},
                             200 if ready else 503)
