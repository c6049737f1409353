"""The network emulation model: round trips per way of connecting, on virtual clocks only."""

from __future__ import annotations

import pytest

from fastmode.backends.drivers import Arrival, VirtualDriver
from fastmode.backends.engine import build
from fastmode.gateway.config import load_config
from fastmode.gateway.http.netem import (
    KEEPALIVE_IDLE_S,
    ConnectionTracker,
    NetemMiddleware,
    NetworkModel,
    modeled_ttft,
    network_time,
)

R = 0.050  # 50 ms round trip


def test_round_trips_per_way_of_connecting() -> None:
    m = NetworkModel(rtt_s=R)
    assert m.enabled
    assert m.handshake_s() == pytest.approx(2 * R)  # TCP 1 RTT + TLS 1.3 1 RTT
    assert m.http_request_s(new_connection=True) == pytest.approx(3 * R)
    assert m.http_request_s(new_connection=False) == pytest.approx(R)
    assert m.ws_connect_s() == pytest.approx(3 * R)  # TCP + TLS + the upgrade
    assert m.ws_turn_s() == pytest.approx(R)
    # TLS 1.2 would add a round trip
    assert NetworkModel(rtt_s=R, tls_rtts=2).http_request_s(new_connection=True) == \
        pytest.approx(4 * R)


def test_disabled_model_charges_nothing() -> None:
    m = NetworkModel.from_ms(0)
    assert not m.enabled
    assert m.http_request_s(new_connection=True, body_bytes=10**6) == 0
    assert m.ws_turn_s() == 0
    assert NetworkModel.from_ms(50).rtt_s == pytest.approx(R)


def test_slow_start_on_fresh_connections_only() -> None:
    m = NetworkModel(rtt_s=R)
    w = m.init_cwnd_bytes
    assert w == 14600  # 10 segments of 1460 bytes
    assert m.slow_start_rtts(0) == 0
    assert m.slow_start_rtts(w) == 0
    assert m.slow_start_rtts(w + 1) == 1  # a second flight of 2W
    assert m.slow_start_rtts(3 * w) == 1
    assert m.slow_start_rtts(3 * w + 1) == 2
    assert m.slow_start_rtts(7 * w) == 2
    big = 100_000
    assert m.http_request_s(new_connection=True, body_bytes=big) == pytest.approx(
        (3 + m.slow_start_rtts(big)) * R)
    # a warm connection's window is open
    assert m.http_request_s(new_connection=False, body_bytes=big) == pytest.approx(R)


def test_connection_tracker_on_a_virtual_clock() -> None:
    tr = ConnectionTracker(idle_timeout_s=KEEPALIVE_IDLE_S, capacity=3)
    a, b = ("127.0.0.1", 40000), ("127.0.0.1", 40001)
    assert tr.begin(a, 0.0) is True  # never seen
    tr.end(a, 1.0)
    assert tr.begin(a, 3.0) is False  # idle 2 s < 5 s: kept alive
    tr.end(a, 3.5)
    assert tr.begin(b, 3.6) is True  # another port: another connection
    assert tr.begin(a, 3.5 + KEEPALIVE_IDLE_S + 0.1) is True  # idle past the timeout: closed
    # a long request is never "idle" while in flight
    assert tr.begin(b, 1000.0) is False
    assert tr.begin(None, 0.0) is True  # no peer address: assume the worst
    for port in range(3):  # bounded: the oldest entries go
        tr.begin(("10.0.0.1", port), 2000.0)
    assert tr.begin(a, 2000.0) is True


async def test_middleware_sleeps_once_per_request_and_sets_network_time() -> None:
    clock = [0.0]
    slept: list[float] = []
    seen: list[float] = []

    async def app(scope, receive, send) -> None:
        seen.append(network_time.get())
        clock[0] += 0.1  # the request takes 100 ms

    async def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    mw = NetemMiddleware(app, NetworkModel(rtt_s=R), clock=lambda: clock[0], sleep=sleep)
    peer = {"type": "http", "client": ("127.0.0.1", 50000), "headers": []}
    await mw(peer, None, None)
    await mw(peer, None, None)
    clock[0] += 10  # idle past the keep-alive timeout
    await mw(peer, None, None)
    await mw({**peer, "client": ("127.0.0.1", 50001),
              "headers": [(b"content-length", b"100000")]}, None, None)
    big = NetworkModel(rtt_s=R).slow_start_rtts(100_000)
    assert slept == pytest.approx([3 * R, R, 3 * R, (3 + big) * R])
    assert seen == slept
    assert network_time.get() == 0.0  # reset after each request
    # websockets and lifespan pass through (the websocket endpoint charges its own turns)
    slept.clear()
    await mw({"type": "websocket", "client": ("127.0.0.1", 1)}, None, None)
    assert slept == []


def _engine_ttft(deployment: str, prompt_tokens: int, arrival: float) -> float:
    """First-token time of one request on an idle replica, minus its arrival (virtual clock)."""
    spec = build(load_config().sim())
    firsts: list[float] = []
    driver = VirtualDriver(spec.deployments, on_first_token=lambda s: firsts.append(
        s.first_token_at))
    driver.run([Arrival(arrival, deployment, prompt_tokens, 50)])
    assert len(firsts) == 1
    return firsts[0] - arrival


@pytest.mark.parametrize("deployment", ["spark", "fast", "standard"])
def test_modeled_ttft_warm_websocket_vs_fresh_https(deployment: str) -> None:
    """Client-side TTFT = network time (the request reaches the engine that much later) +
    the engine's queue, prefill and first step, all on the virtual clock."""
    m = NetworkModel.from_ms(50)
    prompt = 40  # a short agent turn
    fresh_net = m.http_request_s(new_connection=True)
    fresh = modeled_ttft(fresh_net, _engine_ttft(deployment, prompt, fresh_net))
    keep = modeled_ttft(m.http_request_s(new_connection=False),
                        _engine_ttft(deployment, prompt, m.rtt_s))
    warm_ws = modeled_ttft(m.ws_turn_s(), _engine_ttft(deployment, prompt, m.ws_turn_s()))
    engine = _engine_ttft(deployment, prompt, 0.0)
    assert fresh == pytest.approx(3 * m.rtt_s + engine)
    assert warm_ws == pytest.approx(m.rtt_s + engine)
    assert keep == pytest.approx(warm_ws)  # both pay one round trip and nothing more
    if deployment == "spark":
        # the published direction: TTFT at least halved on the wafer-scale tier
        assert warm_ws <= 0.5 * fresh
        assert engine < m.rtt_s  # the network, not the engine, dominates its TTFT
    assert warm_ws < fresh
    # without emulation the transports are equal
    off = NetworkModel.from_ms(0)
    assert off.http_request_s(new_connection=True) + engine == pytest.approx(
        off.ws_turn_s() + engine)
