"""The state store's breaker (gateway.state.health), without a Redis: one log line when an
outage begins and one when it ends however many calls fail meanwhile, calls refused at once
while it lasts, a 503 in the routes' terms, and the metrics Prometheus reads."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fastmode.gateway.state.health import StateCollector, StateHealth, StateUnavailable


def test_an_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = [100.0]
    health = StateHealth("Redis", logging.getLogger("test.state"), clock=lambda: clock[0])
    caplog.set_level(logging.WARNING, "test.state")
    health.guard("take")  # up: nothing happens
    for _ in range(50):  # calls in flight when Redis went away, failing one after another
        error = health.failed("take", ConnectionRefusedError("Connection refused"))
        assert isinstance(error, StateUnavailable)
    assert error.status == 503 and error.code == "state_unavailable"
    assert error.headers == {"retry-after": "1", "retry-after-ms": "1000"}
    for _ in range(200):  # later calls: refused without trying
        with pytest.raises(StateUnavailable):
            health.guard("get_response")
    clock[0] += 4.25
    health.answered()
    health.answered()  # the next probe: already up, nothing to say
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("state unavailable: Redis did not answer (ConnectionRefusedError")
    assert lines[1] == ("state available again: Redis answers after 4.2 s; 50 calls failed and "
                        "200 were refused without trying meanwhile")
    health.guard("take")  # up again
    health.failed("flush", TimeoutError())  # a second outage: its own line and its own counts
    clock[0] += 1
    health.answered()
    assert len(caplog.records) == 4
    assert caplog.records[3].getMessage().endswith("1 calls failed and 0 were refused without "
                                                   "trying meanwhile")
    assert health.outages == 2 and health.up


def test_the_metrics_say_whether_the_state_answers() -> None:
    health = StateHealth("Redis", logging.getLogger("test.state"))
    registry = CollectorRegistry()
    registry.register(StateCollector(health))
    assert 'fastmode_state_up{backend="Redis"} 1.0' in generate_latest(registry).decode()
    health.failed("take", TimeoutError())
    with pytest.raises(StateUnavailable):
        health.guard("take")
    health.limits_fail_open += 2
    text = generate_latest(registry).decode()
    for sample in ('fastmode_state_up{backend="Redis"} 0.0',
                   'fastmode_state_outages_total{backend="Redis"} 1.0',
                   'fastmode_state_errors_total{backend="Redis",operation="take"} 1.0',
                   'fastmode_state_fail_fast_total{backend="Redis",operation="take"} 1.0',
                   'fastmode_state_limits_fail_open_total{backend="Redis"} 2.0'):
        assert sample in text, sample
