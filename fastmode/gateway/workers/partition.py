"""Which replicas each worker process owns: the deployments' replicas, partitioned.

A replica is one continuous-batching scheduler: its batch, its KV cache and its share of the
other tenants' load (``[deployments.NAME.background]`` is per replica). Splitting a replica
across processes would make several half-empty batches out of one (wrong physics), so each
replica lives in exactly one worker: worker ``i`` of ``n`` runs ``replicas // n`` replicas of a
deployment, plus one more for the first ``replicas % n`` workers. Connections reach the workers
through the kernel (SO_REUSEPORT), so every worker must own a replica of every in-process
deployment: a config with fewer replicas than workers is refused with the numbers to change.
Deployments whose every tier is served by remote engines are not simulated in the workers'
traffic and are not partitioned (each worker keeps its idle copy).
"""

from __future__ import annotations

from fastmode.gateway.config import Config


class WorkersError(ValueError):
    """The config cannot run on that many workers; the message says what to change."""


def local_deployments(config: Config) -> list[str]:
    """Deployments that serve at least one tier in process."""
    remote = set(config.remote.tiers)
    return [name for name in config.deployments
            if any(t.deployment == name and t_name not in remote
                   for t_name, t in config.tiers.items())]


def partition(config: Config, workers: int) -> list[Config]:
    """The config of each worker (``workers`` >= 1)."""
    if workers < 1:
        raise WorkersError("--workers: must be at least 1")
    local = local_deployments(config)
    short = {n: config.deployments[n].replicas for n in local
             if config.deployments[n].replicas < workers}
    if short:
        name, have = min(short.items(), key=lambda kv: kv[1])
        raise WorkersError(
            f"--workers {workers}: deployment {name!r} has {have} replica(s), and a replica is "
            f"never split across processes; every worker needs one replica of each in-process "
            f"deployment. Use --workers {have} or fewer, or set deployments.{name}.replicas "
            f"to at least {workers}.")
    if workers > 1:
        limited = [k.key for k in config.auth.keys if k.limits] if config.auth.enabled else []
        if limited and not config.state.redis_url:
            raise WorkersError(
                f"--workers {workers}: API keys with limits ({limited[0]!r}...) need state "
                "shared by the workers, or each worker would grant the whole limit: set "
                "[state] redis_url (or FASTMODE_REDIS_URL).")
    out = []
    for i in range(workers):
        deps = {}
        for name, dep in config.deployments.items():
            if name in local:
                n = dep.replicas // workers + (1 if i < dep.replicas % workers else 0)
                dep = dep.model_copy(update={"replicas": n})
            deps[name] = dep
        out.append(config.model_copy(update={"deployments": deps}))
    return out
