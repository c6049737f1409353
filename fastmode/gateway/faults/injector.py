"""Which fault, if any, a request gets: the header, admin rules, config rules; seeded draws.

Precedence: the request's own ``x-fastmode-fault`` header, then the rules set through the admin
API (those scoped to the request's ``x-fastmode-test-id`` and the global ones), then the rules
of ``[faults]`` in the config. The first that matches the request (tier, API key, model) and
wins its draw (probability ``p``) is injected. Draws come from one ``random.Random`` seeded by
``faults.seed``, and a rule with ``p = 1`` draws nothing, so a sequential test sees the same
faults on every run.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fastmode.gateway.config import FaultsConfig, ServerConfig
from fastmode.gateway.errors import APIError, retry_headers
from fastmode.gateway.fault_kinds import Kind
from fastmode.gateway.observe.metrics import Metrics
from fastmode.gateway.state import StateBackend
from fastmode.gateway.values.fault_spec import (
    HEADER,
    TEST_ID_HEADER,
    Fault,
    from_rule,
    parse_header,
)

if TYPE_CHECKING:
    from fastmode.gateway.testing import TestScopes

log = logging.getLogger("fastmode.faults")

NAMESPACE = "faults"  # settings namespace of the admin rules; scope "" = every request


class FaultInjector:
    def __init__(self, config: FaultsConfig, server: ServerConfig, state: StateBackend,
                 metrics: Metrics) -> None:
        self.config = config
        self.server = server
        self.state = state
        self.metrics = metrics
        self.rules = [from_rule(r, "config") for r in config.rules]
        self.rng = random.Random(config.seed)
        self.tests: TestScopes | None = None  # per-test counted faults (gateway.testing)

    def parse(self, headers: Mapping[str, str]) -> Fault | None:
        """The header's fault (validated early: a malformed header is a 400)."""
        raw = headers.get(HEADER) if self.config.enabled else None
        return parse_header(raw) if raw else None

    def candidates(self, headers: Mapping[str, str]) -> list[Fault]:
        out: list[Fault] = []
        own = self.parse(headers)
        if own is not None:
            out.append(own)
        if not self.config.enabled:
            return out
        test_id = headers.get(TEST_ID_HEADER, "")
        admin = self.state.settings(NAMESPACE)
        for scope in ((test_id, "") if test_id else ("",)) if admin else ():
            out.extend(from_rule(rule, "admin") for (sc, _), rule in sorted(admin.items(),
                                                                            key=str)
                       if sc == scope)
        out.extend(self.rules)
        return out

    def draw(self, headers: Mapping[str, str], *, tier: str, key: str,
             model: str) -> Fault | None:
        scope = self.tests.get(headers.get(TEST_ID_HEADER, "")) if self.tests else None
        if scope is not None and self.config.enabled:
            counted = scope.fault(tier, key, model)
            if counted is not None:
                return counted
        for fault in self.candidates(headers):
            if not fault.matches(tier, key, model):
                continue
            if fault.p >= 1.0 or (fault.p > 0 and self.rng.random() < fault.p):
                return fault
        return None

    def injected(self, fault: Fault, tier: str, request_id: str) -> None:
        """Count and log one injected fault (``fastmode_faults_injected_total{kind,tier}``)."""
        self.metrics.faults.labels(fault.kind, tier).inc()
        log.warning("fault injected: kind=%s tier=%s request=%s source=%s after=%d s=%s",
                    fault.kind, tier, request_id, fault.source, fault.after, fault.s)

    def status_error(self, fault: Fault) -> APIError:
        """The error a status fault answers with (the protocol renders it in its format)."""
        wait = fault.seconds(self.server.retry_after_s)
        retry = retry_headers(wait)
        msg = f"Injected fault ({HEADER}: {fault.kind})."
        if fault.kind is Kind.S429:
            limits = {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0",
                      "x-ratelimit-reset-requests": f"{max(wait, 0.001):.3g}s",
                      "x-ratelimit-limit-tokens": "100000",
                      "x-ratelimit-remaining-tokens": "0",
                      "x-ratelimit-reset-tokens": f"{max(wait, 0.001):.3g}s",
                      "anthropic-ratelimit-requests-remaining": "0"}
            return APIError(429, f"Rate limit reached. {msg}", code="rate_limit_exceeded",
                            type="requests", headers={**limits, **retry})
        if fault.kind is Kind.S503:
            return APIError(503, f"The service is unavailable. {msg}",
                            code="service_unavailable", headers=retry)
        if fault.kind is Kind.S529:
            return APIError(529, f"Overloaded. {msg}", code="overloaded",
                            type="overloaded_error", headers=retry)
        return APIError(500, f"The server had an error while processing your request. {msg}",
                        code="injected_fault", type="server_error")

    def stream_error(self, fault: Fault) -> APIError:
        """The error event of an ``error-event`` fault."""
        return APIError(500, f"The server had an error while streaming. Injected fault "
                        f"({HEADER}: {fault.kind}).", code="injected_fault", type="server_error")
