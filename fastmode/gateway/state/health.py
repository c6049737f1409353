"""Whether the state store answers: a breaker, one log line per outage, and its metrics.

A remote store (Redis) is a dependency that can fail: stopped (connections refused), hung
(connections accepted, nothing answered) or slow. Each call on a request's path is bounded by a
short timeout (``[state] timeout_s``); the first call that fails opens the breaker and logs one
line; while it is open, calls fail at once (``StateUnavailable``, a 503 in the route's format)
without a round trip, so an outage neither holds requests for the timeout each nor piles
connections onto a hung server; a probe (the backend's background task, every
``flush_interval_s``) closes it when the store answers again, and logs one line. Nothing here
blocks or sleeps: it only counts and decides.

The embedded SQLite store is local and never "down": its health stays up.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fastmode.gateway.errors import APIError, retry_headers

RETRY_S = 1.0  # what a refused client is told: the probe runs far more often than this


class StateUnavailable(APIError):
    """The shared state did not answer (or is known not to): 503, retry shortly.

    An ``APIError``, so that wherever it surfaces (a turn's admission, a route reading stored
    responses or usage) the client gets the route's own error format, never a 500."""

    def __init__(self, backend: str, retry_s: float = RETRY_S, detail: str = "") -> None:
        super().__init__(
            503,
            detail or f"The gateway's shared state ({backend}) is unavailable, so this request "
            "cannot be checked against its limits or stored state. Retry shortly.",
            code="state_unavailable", type="service_unavailable_error",
            headers=retry_headers(retry_s))


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class StateHealth:
    """The breaker and the books of one state backend (see the module docstring)."""

    def __init__(self, backend: str, log: logging.Logger | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.log = log or logging.getLogger("fastmode.state")
        self.clock = clock
        self.up = True
        self.since = clock()  # when ``up`` last changed
        self.outages = 0
        self.errors: Counter[str] = Counter()  # calls that tried and failed, by operation
        self.fail_fast: Counter[str] = Counter()  # calls refused without trying (breaker open)
        self.limits_fail_open = 0  # requests served without their limit ([state] knob)
        self._before = (0, 0)  # errors and fail-fast calls when the outage began

    def guard(self, op: str) -> None:
        """Before a call: while the store is down, fail at once (no round trip)."""
        if not self.up:
            self.fail_fast[op] += 1
            raise StateUnavailable(self.backend)

    def failed(self, op: str, exc: BaseException) -> StateUnavailable:
        """A call failed: count it; the first failure of an outage opens the breaker and is
        the outage's one log line. Returns the error for the caller to raise."""
        if self.up:
            self.up = False
            self.since = self.clock()
            self.outages += 1
            self._before = (sum(self.errors.values()), sum(self.fail_fast.values()))
            self.log.warning(
                "state unavailable: %s did not answer (%s on %s); requests that need it get "
                "503 until it answers again (probed every few hundred ms)", self.backend,
                _why(exc), op)
        self.errors[op] += 1
        return StateUnavailable(self.backend)

    def answered(self) -> None:
        """The probe got an answer: close the breaker (the outage's second and last line)."""
        if not self.up:
            down_s = self.clock() - self.since
            self.up = True
            self.since = self.clock()
            errors, refused = self._before
            self.log.warning(
                "state available again: %s answers after %.1f s; %d calls failed and %d were "
                "refused without trying meanwhile", self.backend, down_s,
                sum(self.errors.values()) - errors, sum(self.fail_fast.values()) - refused)


class StateCollector:
    """``fastmode_state_*`` in /metrics, read from a ``StateHealth`` at scrape time."""

    def __init__(self, health: StateHealth) -> None:
        self.health = health

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        h = self.health
        up = GaugeMetricFamily("fastmode_state_up", "1 when the shared state store answers, "
                               "0 during an outage", labels=["backend"])
        up.add_metric([h.backend], 1.0 if h.up else 0.0)
        outages = CounterMetricFamily("fastmode_state_outages", "Outages of the state store "
                                      "(each logged once)", labels=["backend"])
        outages.add_metric([h.backend], h.outages)
        errors = CounterMetricFamily(
            "fastmode_state_errors", "Calls to the state store that failed (refused, timed "
            "out, errored)", labels=["backend", "operation"])
        fast = CounterMetricFamily(
            "fastmode_state_fail_fast", "Calls refused without a round trip while the store "
            "was down", labels=["backend", "operation"])
        for counter, family in ((h.errors, errors), (h.fail_fast, fast)):
            for op, n in sorted(counter.items()):
                family.add_metric([h.backend, op], n)
        open_ = CounterMetricFamily(
            "fastmode_state_limits_fail_open", "Requests served without their rate limit "
            "counted because the store was unavailable ([state] limits_fail_open)",
            labels=["backend"])
        open_.add_metric([h.backend], h.limits_fail_open)
        yield from (up, outages, errors, fast, open_)
