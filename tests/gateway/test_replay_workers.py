"""Record and replay as a user runs them, with the real commands: ``fastmode engine`` as the
upstream, ``fastmode serve --upstream … --record DIR`` in front of it, then ``fastmode serve
--workers 2 --replay DIR`` with its state in Redis: every worker replays the cassettes, and a
Responses conversation continued on new connections (any worker) finds its stored turns."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, launch, quick_config_text, stop_server
from prometheus_client.parser import text_string_to_metric_families
from test_redis_state import REDIS, redis_server

from bench.harness import free_port

pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")


@contextlib.contextmanager
def engine(config: Path) -> Iterator[str]:
    """``fastmode engine --deployment standard`` in a subprocess; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fastmode", "engine", "--deployment",
                             "standard", "--port", str(port), "--config", str(config)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "engine did not start"
            time.sleep(0.05)
        yield url
    finally:
        stop_server(proc)


def conversation(url: str) -> list[bytes]:
    """Three Responses turns, each continuing the last, each on a new connection."""
    out, prev = [], None
    for text in ("Name a sea.", "Another one?", "And a third?"):
        body = {"model": "frontier", "input": text, "max_output_tokens": 12,
                **({"previous_response_id": prev} if prev else {})}
        r = httpx.post(url + "/v1/responses", json=body, timeout=20)
        assert r.status_code == 200, r.text
        out.append(r.content)
        prev = r.json()["id"]
    return out


def served_by_worker(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "fastmode_requests_total" and s.labels.get("status") == "200":
                w = s.labels["worker"]
                out[w] = out.get(w, 0.0) + s.value
    return out


def test_record_from_an_engine_then_replay_on_two_workers_sharing_redis(tmp_path) -> None:
    spec = __import__("importlib.util").util.spec_from_file_location(
        "agent_loop", ROOT / "examples/agent_loop.py")
    agent = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    config = tmp_path / "quick.toml"
    config.write_text(quick_config_text())
    cassettes = tmp_path / "cassettes"
    with engine(config) as upstream:
        proc, url = launch("--config", str(config), "--upstream", upstream,
                           "--record", str(cassettes))
        try:
            recorded = conversation(url)
            steps = agent.run(url + "/v1")
        finally:
            stop_server(proc)
    check = subprocess.run([sys.executable, "-m", "fastmode", "replay-check", str(cassettes)],
                           cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.strip().endswith(": ok"), check.stdout
    with redis_server(tmp_path) as redis_url:
        proc, url = launch("--config", str(config), "--workers", "2", "--replay",
                           str(cassettes), env={"FASTMODE_REDIS_URL": redis_url})
        try:
            for _ in range(4):  # new connections: the kernel spreads them over the workers
                assert conversation(url) == recorded
            assert agent.run(url + "/v1") == steps
            served = served_by_worker(url)
            for _ in range(30):  # the kernel may hand a few connections in a row to one worker
                if len(served) == 2:
                    break
                assert conversation(url) == recorded
                served = served_by_worker(url)
        finally:
            stop_server(proc)
    assert len(served) == 2 and all(n > 0 for n in served.values()), served
