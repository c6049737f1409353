"""Redis as a dependency that can fail, against a real ``redis-server``
and a real ``fastmode serve``: Redis killed, then hung (SIGSTOP), then back.

What must hold: a request that needs the shared state (a key with a limit) gets a 503 with
``retry-after`` in its route's own format, never a 500 with a traceback; the event loop is never
blocked (``/healthz`` answers at once while Redis hangs); the outage is logged once and the
recovery once, not per request; ``/metrics`` says whether the state answers; and the gateway
recovers without a restart. ``[state] limits_fail_open`` lets limited requests through
instead. Without the redis-server binary the tests are skipped, saying so."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import free_port, launch, stop_server

from fastmode.gateway.config import default_config_text

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    REDIS is None, reason="redis-server is not installed (apt-get install redis-server)")

KEY = "sk-limited"
AUTH = {"authorization": f"Bearer {KEY}"}
HI = [{"role": "user", "content": "hi"}]
# one limited request on each route (the key has a limit on spark, the tier of frontier-spark)
LIMITED = {
    "chat": ("/v1/chat/completions", {"model": "frontier-spark", "messages": HI,
                                      "max_tokens": 2}),
    "responses": ("/v1/responses", {"model": "frontier-spark", "input": "hi",
                                    "max_output_tokens": 2}),
    "messages": ("/v1/messages", {"model": "frontier-spark", "messages": HI, "max_tokens": 2}),
}
UNLIMITED = ("/v1/chat/completions", {"model": "frontier", "messages": HI, "max_tokens": 2})


class RedisServer:
    """A private redis-server on one loopback port that a test can kill, restart, stop
    (SIGSTOP: a hung Redis: connections are accepted, nothing answers) and continue."""

    def __init__(self, tmp: Path) -> None:
        assert REDIS is not None
        self.port = free_port()
        self.tmp = tmp
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        import redis

        assert REDIS is not None
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.proc.kill()
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)
        client.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    try:
        yield server
    finally:
        server.close()


def config(url: str, fail_open: bool = False) -> str:
    """The default config, auth on (one key limited on spark), the state in Redis."""
    text = default_config_text()
    auth = text.index("[auth]\nenabled = false")
    end = text.index("\n", auth + len("[auth]\n"))
    text = text[:auth] + f"""[auth]
enabled = true
[[auth.keys]]
key = "{KEY}"
[auth.keys.limits.spark]
requests_per_minute = 100000
""" + text[end + 1:]
    start = text.index("\n[state]\n") + 1
    stop = text.index("\n# [faults]", start)
    return text[:start] + f"""[state]
path = ":memory:"
redis_url = "{url}"
flush_interval_s = 0.05
timeout_s = 0.2
limits_fail_open = {"true" if fail_open else "false"}
""" + text[stop:]


@pytest.fixture
def gateway(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``fastmode serve`` on Redis state; yields (base URL, its stderr log)."""
    log_path = tmp_path / "gateway.log"
    with log_path.open("w+b") as log:
        proc, url = launch(config_text=config(redis_server.url), tmp=tmp_path, log=log)
        try:
            yield url, log_path
        finally:
            stop_server(proc)


def post(url: str, route: str, body: dict, timeout: float = 30) -> httpx.Response:
    return httpx.post(url + route, json=body, headers=AUTH, timeout=timeout)


def state_metric(url: str, name: str) -> float:
    """One ``fastmode_state_*`` sample of ``/metrics`` (the sum over its labels)."""
    lines = [line for line in httpx.get(url + "/metrics").text.splitlines()
             if line.startswith(name + "{") or line.startswith(name + " ")]
    assert lines, f"{name} is not in /metrics"
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def assert_unavailable(name: str, r: httpx.Response) -> None:
    """503, retry-after in whole seconds agreeing with retry-after-ms, the route's format."""
    assert r.status_code == 503, (name, r.status_code, r.text)
    ms = int(r.headers["retry-after-ms"])
    assert ms > 0 and int(r.headers["retry-after"]) == math.ceil(ms / 1000)
    body = r.json()
    if name == "messages":  # Anthropic's error body
        assert body["type"] == "error" and body["error"]["type"] == "api_error", body
        assert "state" in body["error"]["message"]
    else:  # OpenAI's
        assert body["error"]["code"] == "state_unavailable", body
        assert body["error"]["type"] == "service_unavailable_error"


def wait_until_ok(url: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while True:
        r = post(url, *LIMITED["chat"])
        if r.status_code == 200:
            return
        assert r.status_code == 503, r.text
        assert time.monotonic() < deadline, "the gateway did not recover without a restart"
        time.sleep(0.05)


def log_lines(path: Path, word: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if word in line]


def test_a_stopped_redis_is_a_503_in_each_routes_format_logged_once(gateway,
                                                                      redis_server) -> None:
    url, log = gateway
    for name, (route, body) in LIMITED.items():
        assert post(url, route, body).status_code == 200, name
    assert state_metric(url, "fastmode_state_up") == 1
    redis_server.kill()
    for _ in range(20):
        for name, (route, body) in LIMITED.items():
            assert_unavailable(name, post(url, route, body))
    # a request that needs nothing from Redis is served (its ledger row waits in memory)
    assert post(url, *UNLIMITED).status_code == 200
    # ... one that needs a stored response made elsewhere, or the usage totals, cannot be
    assert_unavailable("responses", post(url, "/v1/responses", {
        "model": "frontier", "input": "hi", "max_output_tokens": 2,
        "previous_response_id": "resp_made_on_another_gateway"}))
    assert_unavailable("usage", httpx.get(url + "/v1/usage", headers=AUTH))
    assert state_metric(url, "fastmode_state_up") == 0
    assert state_metric(url, "fastmode_state_errors_total") >= 1
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "internal_error" not in text
    assert len(log_lines(log, "state unavailable")) == 1, text
    # back without a restart of the gateway: limited requests are served again
    redis_server.start()
    wait_until_ok(url)
    for name, (route, body) in LIMITED.items():
        assert post(url, route, body).status_code == 200, name
    assert state_metric(url, "fastmode_state_up") == 1
    assert state_metric(url, "fastmode_state_outages_total") == 1
    assert len(log_lines(log, "state unavailable")) == 1
    assert len(log_lines(log, "state available again")) == 1
    assert "Traceback" not in log.read_text(errors="replace")


def test_a_hung_redis_never_blocks_the_event_loop(gateway, redis_server) -> None:
    """SIGSTOP: Redis accepts connections and answers nothing. Limited requests fail fast
    (about the state timeout, 0.2 s here) while ``/healthz`` keeps answering at once; SIGCONT
    and they are served again."""
    url, log = gateway
    assert post(url, *LIMITED["chat"]).status_code == 200
    redis_server.signal(signal.SIGSTOP)
    stalls: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=30) as c:
            while not stop.is_set():
                t0 = time.perf_counter()
                assert c.get(url + "/healthz").status_code == 200
                stalls.append(time.perf_counter() - t0)
                time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    results: list[tuple[int, float]] = []

    def limited(name: str) -> None:
        route, body = LIMITED[name]
        t0 = time.perf_counter()
        r = post(url, route, body)
        results.append((r.status_code, time.perf_counter() - t0))
        assert_unavailable(name, r)

    try:
        for _ in range(3):  # waves of concurrent limited requests on every route
            wave = [threading.Thread(target=limited, args=(name,)) for name in LIMITED]
            wave += [threading.Thread(target=limited, args=("chat",)) for _ in range(5)]
            for t in wave:
                t.start()
            for t in wave:
                t.join()
        assert post(url, *UNLIMITED).status_code == 200  # no Redis needed: served
    finally:
        stop.set()
        prober.join()
    assert [status for status, _ in results] == [503] * 24
    # each answered within a few state timeouts (0.2 s), not the 2 s a blocking client took;
    # /healthz never waited for Redis
    assert max(seconds for _, seconds in results) < 2.0, results
    assert len(stalls) > 5 and max(stalls) < 0.5, max(stalls)
    redis_server.signal(signal.SIGCONT)
    wait_until_ok(url)
    assert len(log_lines(log, "state unavailable")) == 1
    assert len(log_lines(log, "state available again")) == 1
    assert "Traceback" not in log.read_text(errors="replace")


def test_limits_fail_open_lets_limited_requests_through(redis_server, tmp_path) -> None:
    """``[state] limits_fail_open = true``: with Redis away a limited key is served without
    its limit (no rate-limit headers: nothing was counted), and /metrics counts them."""
    with (tmp_path / "gateway.log").open("w+b") as log:
        proc, url = launch(config_text=config(redis_server.url, fail_open=True), tmp=tmp_path,
                           log=log)
        try:
            ok = post(url, *LIMITED["chat"])
            assert ok.status_code == 200 and "x-ratelimit-remaining-requests" in ok.headers
            redis_server.kill()
            for name, (route, body) in LIMITED.items():
                r = post(url, route, body)
                assert r.status_code == 200, (name, r.text)
                assert "x-ratelimit-remaining-requests" not in r.headers
            assert state_metric(url, "fastmode_state_limits_fail_open_total") == 3
            assert state_metric(url, "fastmode_state_up") == 0
        finally:
            stop_server(proc)
    text = (tmp_path / "gateway.log").read_text(errors="replace")
    assert "Traceback" not in text and len(log_lines(tmp_path / "gateway.log",
                                                     "state unavailable")) == 1
