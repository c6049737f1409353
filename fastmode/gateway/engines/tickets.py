"""The admission interface: what every backend of a tier (the in-process engine, a remote pool
of upstreams) is asked, and how it says "not now".

The shared front (``Gateway.admit``) runs the checks every tier gets — the context window, the
key's limits with the same arguments, the overflow policy — and hands the backend a ``Ticket``:
the request, its ``Decision``, the tier of this attempt (the decision's, or the standard tier
after a downgrade) and the cap. A backend answers with an admitted ``Job`` whose ``stream`` is a
``TokenSource`` (``gateway.values.token_source``), or raises ``Refused`` when its pool cannot take the
request now; the front decides what a refusal means for the role. The turn never learns which
kind of backend served it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from fastmode.backends.engine import Tier
from fastmode.backends.pricing import Prices
from fastmode.gateway.errors import APIError
from fastmode.gateway.values.decision import Decision
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest
from fastmode.gateway.values.roles import Role


@dataclass(frozen=True)
class Ticket:
    request: TurnRequest
    decision: Decision
    tier: Tier  # this attempt's tier
    role: Role  # the role this attempt serves (standard after a downgrade)
    cap: int  # output tokens the request may produce (within the context window)
    headers: Mapping[str, str]  # the rate-limit headers of the key's take
    stream: bool  # ask the backend for a stream (the websocket always streams)
    pool_full: bool = False  # the ``fast-exhausted`` fault: act as if the pool were full
    # for a non-streamed request: resolves when the client goes away (a backend that waits
    # for a whole answer gives up then, with ``ClientGone``)
    disconnected: Callable[[], Awaitable[None]] | None = None

    @property
    def prices(self) -> Prices:
        """What this attempt bills per MTok: the model's prices for the role and tier that
        serve it (after a downgrade, the standard ones)."""
        return self.decision.prices(self.role, self.tier)


class Refused(Exception):
    """The tier's pool cannot take the request now.

    ``retry_s``: when the backend modeled a retry would succeed; ``wait_s``: the modeled queue
    wait, when that was the reason; ``queue``: who holds a full queue's places (this gateway's
    requests, the other tenants' — modeled, ``backends.tenants``), when that was; ``error``: the backend's own answer (an upstream's 429 or
    503), passed on as it is when the policy has nowhere else to go."""

    def __init__(self, retry_s: float, wait_s: float | None = None,
                 error: APIError | None = None, queue: tuple[int, int] | None = None) -> None:
        super().__init__("refused")
        self.retry_s = retry_s
        self.wait_s = wait_s
        self.error = error
        # a full queue's places: (the gateway's requests, the other tenants' requests)
        self.queue = queue


class ClientGone(Exception):
    """The client went away before admission (e.g. during a ``timeout`` fault, or while a
    non-streamed remote request waited for its upstream)."""


class Admission(Protocol):
    """A tier's backend: admits a ticket or raises ``Refused`` (or an APIError that is final:
    a bad request, an upstream that cannot be reached)."""

    async def admit(self, ticket: Ticket) -> Job: ...
