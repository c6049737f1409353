"""`fastmode serve --workers N`: replicas partitioned over worker processes on one port.

Partitioning is checked on the config; then a real 2-worker gateway (processes, SO_REUSEPORT)
serves requests on many connections, both workers take some, /metrics merges both (a `worker`
label on every sample) and a too-small config is refused before anything starts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import tomllib

import httpx
import pytest
from conftest import ROOT, launch
from prometheus_client.parser import text_string_to_metric_families

from fastmode.gateway.config import Config, default_config_text, load_config
from fastmode.gateway.workers import WorkersError, partition


def test_each_replica_in_exactly_one_worker() -> None:
    config = load_config()
    for n in (1, 2):
        parts = partition(config, n)
        assert len(parts) == n
        for name, dep in config.deployments.items():
            shares = [p.deployments[name].replicas for p in parts]
            assert sum(shares) == dep.replicas and min(shares) >= 1, (name, shares)
            assert max(shares) - min(shares) <= 1
            for p in parts:  # the other tenants' load is per replica: it moves with it
                assert p.deployments[name].background == dep.background


def test_too_few_replicas_is_refused_with_the_numbers() -> None:
    config = load_config()
    fewest = min(d.replicas for d in config.deployments.values())
    with pytest.raises(WorkersError, match=rf"--workers {fewest + 1}: deployment .* has "
                                           rf"{fewest} replica"):
        partition(config, fewest + 1)


def test_remote_deployments_are_not_partitioned() -> None:
    raw = tomllib.loads(default_config_text())
    for name, dep in raw["deployments"].items():
        dep["replicas"] = 2 if name == "spark" else 3
    for group in raw["fleet"]["nodes"].values():
        group["count"] = 64  # room for every pool's replicas
    with pytest.raises(WorkersError, match="spark"):
        partition(Config.model_validate(raw), 3)
    raw["remote"] = {"tiers": {t: {"upstreams": ["http://engine:1"]}
                               for t, tier in raw["tiers"].items()
                               if tier["deployment"] == "spark"}}
    parts = partition(Config.model_validate(raw), 3)  # spark is served remotely
    assert all(p.deployments["spark"].replicas == 2 for p in parts)
    assert all(p.deployments["standard"].replicas == 1 for p in parts)


def test_limits_need_shared_state_across_workers() -> None:
    raw = tomllib.loads(default_config_text())
    raw["auth"] = {"enabled": True, "keys": [
        {"key": "k", "limits": {"fast": {"requests_per_minute": 5}}}]}
    with pytest.raises(WorkersError, match="redis_url"):
        partition(Config.model_validate(raw), 2)
    raw["state"] = {"redis_url": "redis://127.0.0.1:6379/0"}
    assert len(partition(Config.model_validate(raw), 2)) == 2


def test_two_workers_serve_one_port_and_merge_metrics(server_factory) -> None:
    url = server_factory("--workers", "2")
    seen_status = []
    for _ in range(24):  # a new connection each time: the kernel spreads them
        with httpx.Client(timeout=30) as c:
            r = c.post(url + "/v1/chat/completions", json={
                "model": "frontier-spark", "max_tokens": 3,
                "messages": [{"role": "user", "content": "hi"}]})
            seen_status.append(r.status_code)
    assert set(seen_status) == {200}
    text = httpx.get(url + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["fastmode_workers_scraped"].samples[0].value == 2
    by_worker: dict[str, float] = {}
    for s in fams["fastmode_requests"].samples:
        if s.name == "fastmode_requests_total":
            by_worker[s.labels["worker"]] = by_worker.get(s.labels["worker"], 0) + s.value
    assert sum(by_worker.values()) == 24
    assert set(by_worker) == {"0", "1"} and min(by_worker.values()) > 0, by_worker
    # every replica of every deployment appears once, in one worker
    replicas = {(s.labels["deployment"], s.labels["replica"], s.labels["worker"])
                for s in fams["fastmode_replica_waiting"].samples}
    config = load_config()
    for name, dep in config.deployments.items():
        assert len({r for r in replicas if r[0] == name}) == dep.replicas


def test_too_many_workers_exits_2_before_serving() -> None:
    r = subprocess.run([sys.executable, "-m", "fastmode", "serve", "--workers", "9",
                        "--port", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--workers 9" in r.stderr and "replica" in r.stderr


def test_sigterm_stops_every_worker() -> None:
    proc, _ = launch("--workers", "2", timeout=60)
    try:
        children = _children(proc.pid)  # the workers (and multiprocessing's resource tracker)
        assert len(children) >= 2
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        # the supervisor joined its workers before exiting; a helper such as the resource
        # tracker ends when it sees its parent gone, a moment later: none may be left running
        deadline = time.monotonic() + 10
        while [c for c in children if _alive(c)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [(c, _cmdline(c)) for c in children if _alive(c)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _children(pid: int) -> list[tuple[int, str]]:
    """The children of ``pid``, as (pid, start time): a pid reused later is another process."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append((int(entry), stat[19]))
    return out


def _alive(child: tuple[int, str]) -> bool:
    try:
        stat = open(f"/proc/{child[0]}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return stat[0] != "Z" and stat[19] == child[1]


def _cmdline(child: tuple[int, str]) -> str:
    try:
        return open(f"/proc/{child[0]}/cmdline").read().replace("\0", " ")
    except OSError:
        return ""


def test_workers_die_with_a_killed_supervisor(tmp_path) -> None:
    """kill -9 of the supervisor: its workers drain and exit, nothing keeps the port."""
    from configs import with_keys

    proc, url = launch("--workers", "2", timeout=60, tmp=tmp_path,
                       config_text=with_keys(shutdown_grace_s=1))
    children = _children(proc.pid)
    try:
        assert len(children) >= 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while [c for c in children if _alive(c)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [(c, _cmdline(c)) for c in children if _alive(c)]
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/healthz", timeout=2)
    finally:
        for pid, _ in children:  # (before the fix: orphans to clean up)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_second_workers_gateway_on_a_busy_port_is_refused(tmp_path) -> None:
    proc, url = launch("--workers", "2", timeout=60, tmp=tmp_path)
    try:
        port = url.rsplit(":", 1)[1]
        r = subprocess.run([sys.executable, "-m", "fastmode", "serve", "--workers", "2",
                            "--port", port], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, r.stdout
        assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
        assert "already in use" in r.stderr.lower() and "Traceback" not in r.stderr
        assert "OpenAI base_url" not in r.stdout  # refused before the banner
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200  # the first serves on
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def _families(text: str) -> dict[str, tuple[str, str, list[tuple[str, tuple, float]]]]:
    """Each family as prometheus_client's parser reads it: type, help, samples (sorted)."""
    return {f.name: (f.type, f.documentation,
                     sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                            for s in f.samples))
            for f in text_string_to_metric_families(text)}


def test_the_merge_gives_the_parsers_families_with_a_worker_label() -> None:
    """``merge`` works on the text; what a Prometheus parser reads from it is each worker's
    families, every sample with its ``worker`` label, plus ``fastmode_workers_scraped``:
    with labels and without, a label value holding a brace, a quote and a backslash, a
    family only one worker has, and an empty label set."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from fastmode.gateway.workers.aggregate import merge

    texts = []
    for w in range(2):
        r = CollectorRegistry()
        c = Counter("fastmode_requests", "Requests", ["tier", "status"], registry=r)
        c.labels("fast", "200").inc(3 + w)
        c.labels('odd}"\\ tier', "429").inc()
        Gauge("fastmode_up", "Up", registry=r).set(1)
        h = Histogram("fastmode_ttft_seconds", "TTFT", ["tier"], buckets=(0.1, 1.0), registry=r)
        h.labels("fast").observe(0.5 + w)
        if w == 1:
            Gauge("fastmode_only_one", "One worker's", ["x"], registry=r).labels("y").set(7)
        texts.append(generate_latest(r).decode())
    merged = merge([(str(w), t) for w, t in enumerate(texts)]).decode()
    got = _families(merged)
    want: dict[str, tuple[str, str, list]] = {}
    for w, t in enumerate(texts):
        for name, (kind, doc, samples) in _families(t).items():
            entry = want.setdefault(name, (kind, doc, []))
            entry[2].extend((n, tuple(sorted((*labels, ("worker", str(w))))), v)
                            for n, labels, v in samples)
    want = {k: (kind, doc, sorted(s)) for k, (kind, doc, s) in want.items()}
    want["fastmode_workers_scraped"] = ("gauge", "Worker processes whose metrics this scrape "
                                        "includes", [("fastmode_workers_scraped", (), 2.0)])
    assert got == want
    assert merged.count("# TYPE fastmode_requests_total counter") == 1
    # an empty label set, as another exporter might write it
    assert 'x{worker="0"} 1' in merge([("0", "# TYPE x gauge\nx{} 1\n")]).decode()
