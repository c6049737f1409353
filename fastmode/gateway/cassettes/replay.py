"""The replay backend: an ``Admission`` (``gateway.engines.tickets``) that serves recorded exchanges.

With ``--replay DIR`` every tier's backend is this one, so a replayed request goes through the
one admission path like any other — authentication, routing, the context window, the key's
limits, faults, settlement, the ledger — and only the backend differs:

- ``recorded`` / ``none`` timing: a ``ReplayJob`` whose stream hands out the recorded events at
  their recorded times (or at once), encoded as recorded (``CassetteEncoder``): the client gets
  the recorded bytes. It is billed at the serving tier's prices for the recorded usage.
- ``modeled`` / ``tier:NAME``: the recorded content as a whole reply (``reply.generation``)
  queued on that tier's in-process deployment like a mock-model reply: the engine's
  ``TokenStream`` paces it, the protocol's own encoder renders it, the tier prices it. The job
  keeps the recorded id and creation time, so ids (response, message, tool calls) are the
  recorded ones; what differs from the recording is what belongs to the tier: speed,
  ``time_info``, cost, ``service_tier``.

A request that matches nothing gets a 404 in the route's format naming the nearest recorded
exchange (``Library.miss``), or with ``miss = "mock"`` the mock model's answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass

from fastmode.backends.engine import Tier
from fastmode.gateway.cassette_config import ReplayConfig
from fastmode.gateway.cassettes.library import Library, Recording, current
from fastmode.gateway.cassettes.replay_stream import ReplayStream
from fastmode.gateway.cassettes.reply import RecordedReply, generation
from fastmode.gateway.engines.engine_admission import EngineAdmission
from fastmode.gateway.engines.tickets import Ticket
from fastmode.gateway.errors import APIError
from fastmode.gateway.http.netem import network_time
from fastmode.gateway.values.job import Job

CASSETTE_HEADER = "x-fastmode-cassette"  # on a replayed answer: the file:line it came from


@dataclass(eq=False)
class ReplayJob(Job):
    """A job whose events are a recording's (its encoder is a ``CassetteEncoder``)."""

    recording: Recording | None = None


class ReplayAdmission:
    def __init__(self, library: Library, config: ReplayConfig, engine: EngineAdmission,
                 tiers: Mapping[str, Tier]) -> None:
        self.library = library
        self.config = config
        self.engine = engine
        self.tiers = tiers
        named = config.timing_tier
        if named is not None and named not in tiers:
            raise ValueError(f"replay.timing: unknown tier {named!r}; allowed: "
                             f"{', '.join(sorted(tiers))}")

    async def admit(self, ticket: Ticket) -> Job:
        wire = current.get()
        rec = self.library.find(wire) if wire is not None else None
        if rec is None:
            if self.config.miss == "mock":
                return await self.engine.admit(ticket)
            if wire is None:  # not a turn of the pipeline (nothing to match on)
                raise APIError(404, "No recorded exchange matches this request.",
                               code="cassette_miss")
            raise self.library.miss(wire)
        return self.serve(ticket, rec)

    def serve(self, ticket: Ticket, rec: Recording) -> Job:
        """The job of a recording found for the ticket, paced as ``timing`` says."""
        timing = self.config.timing
        if timing == "modeled":
            return self._modeled(ticket, rec, ticket.tier)
        named = self.config.timing_tier
        if named is not None:
            return self._modeled(ticket, rec, self.tiers[named])
        return self._recorded(ticket, rec, delay=timing == "recorded")

    def _recorded(self, ticket: Ticket, rec: Recording, delay: bool) -> ReplayJob:
        entry, tr = rec.entry, rec.transcript
        loop = asyncio.get_running_loop()
        if entry.events is not None:
            offsets, units = [e.t for e in entry.events], tr.units
        else:
            offsets, units = [entry.t or 0.0], [len(tr.pieces)]
        stream = ReplayStream(offsets, units, loop.time(), loop.time, delay)
        request, decision = ticket.request, ticket.decision
        prompt = tr.prompt_tokens if tr.prompt_tokens is not None else request.prompt_tokens
        job = ReplayJob(
            id=tr.job_id(entry.protocol) or "", model=request.model, tier=ticket.tier,
            role=ticket.role, requested_tier=decision.tier.name, gen=RecordedReply(tr),
            prompt_tokens=prompt, cached_tokens=min(tr.cached_tokens, prompt), stream=stream,
            created=tr.created if isinstance(tr.created, int) else int(time.time()),
            principal=decision.principal, network_s=network_time.get(),
            headers={**ticket.headers, CASSETTE_HEADER: rec.where}, recording=rec)
        return job  # (its stream's tag stays None: no engine's metrics read it)

    def _modeled(self, ticket: Ticket, rec: Recording, tier: Tier) -> Job:
        """The recorded reply on ``tier``'s engine: paced and priced there."""
        tr = rec.transcript
        job = self.engine.admit_now(dataclasses.replace(
            ticket, tier=tier,  # the tier's own prices: not the model's era for the role asked
            decision=dataclasses.replace(ticket.decision, pricing=None)),
                                    reply=generation(tr))
        job.id = tr.job_id(rec.entry.protocol) or job.id
        if isinstance(tr.created, int):
            job.created = tr.created
        job.requested_tier = tier.name  # the tier asked for, by the replay: not a downgrade
        job.headers[CASSETTE_HEADER] = rec.where
        return job
