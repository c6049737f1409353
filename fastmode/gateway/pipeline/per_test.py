"""The per-test front of every tier's backend: a test's cassette, its scripted replies on a
remote tier, and its journal of what a remote tier answered.

A test's replies, faults and journal belong to the gateway the test talks to (the front): the
test registered them there, and the tier's upstream — another fastmode gateway or ``fastmode
engine`` — neither knows the test nor is told about it (the test id is not sent upstream). So
the front applies them: a fault is drawn at the front for every tier (``FaultInjector``); a
scripted reply of a request on a remote tier is queued on the front's own deployment of that
tier, paced by the front's model, instead of going upstream; the upstream's answer of any other
request is written to the test's journal. In-process tiers do their own (``EngineAdmission``).

A test with a cassette (``gateway.cassettes.scoped``) that replays has its recorded exchanges
served here, before any of that; the others go on to the tier and, recording, are taped by the
turn (``gateway.cassettes.hooks``).
"""

from __future__ import annotations

from fastmode.gateway.cassettes.library import current
from fastmode.gateway.cassettes.scoped import TestCassettes
from fastmode.gateway.engines.engine_admission import EngineAdmission
from fastmode.gateway.engines.tickets import Admission, Ticket
from fastmode.gateway.testing.scopes import TestScopes
from fastmode.gateway.values.job import Job


class PerTest:
    """An ``Admission`` in front of a tier's own (``inner``)."""

    def __init__(self, inner: Admission, engine: EngineAdmission, tests: TestScopes,
                 cassettes: TestCassettes) -> None:
        self.inner = inner
        self.engine = engine
        self.tests = tests
        self.cassettes = cassettes

    async def admit(self, ticket: Ticket) -> Job:
        test_id = ticket.decision.test_id
        if not test_id:
            return await self.inner.admit(ticket)
        cassette = self.cassettes.get(test_id)
        scope = self.tests.get(test_id)
        if cassette is not None and cassette.replaying:
            wire = current.get()
            rec = cassette.find(wire)
            if rec is not None and cassette.replay is not None:
                job = cassette.replay.serve(ticket, rec)  # (timing "none": not the engine's)
                if scope is not None:
                    scope.note(job, ticket.request, False)
                return job
            if cassette.recorder is None:  # replay only: the file must hold it
                raise cassette.miss(wire)
        if self.inner is self.engine or scope is None:
            return await self.inner.admit(ticket)
        if ticket.tier.deployment.name in self.engine.deployments:
            r = ticket.request.generation
            reply = scope.scripted(r.messages, ticket.cap, tuple(r.stop))
            if reply is not None:
                return self.engine.admit_now(ticket, reply=reply, scripted=True)
        job = await self.inner.admit(ticket)
        scope.note(job, ticket.request, False)
        return job
