"""Where record and replay meet the turn pipeline: two calls of ``Turn.start``.

``before`` (just before admission) normalises the request once and makes it the one the replay
backend matches (``library.current``); ``after`` (once admitted) gives a replayed job its
cassette encoder, or starts the tape of a recorded one. ``install`` builds them for an app from
``[record]`` / ``[replay]`` and makes the replay backend every tier's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from fastmode.backends.engine import Tier
from fastmode.gateway.cassettes.encoder import CassetteEncoder
from fastmode.gateway.cassettes.library import Library, Wire, current
from fastmode.gateway.cassettes.matching import normalised
from fastmode.gateway.cassettes.recorder import Recorder, Tape
from fastmode.gateway.cassettes.replay import ReplayAdmission, ReplayJob
from fastmode.gateway.cassettes.scoped import TestCassettes
from fastmode.gateway.config import Config
from fastmode.gateway.engines.engine_admission import EngineAdmission
from fastmode.gateway.engines.tickets import Admission
from fastmode.gateway.observe.exchange_format import Redactor, load_hook
from fastmode.gateway.protocols.base import Encoder, RequestContext
from fastmode.gateway.protocols.base import Protocol as WireProtocol
from fastmode.gateway.values.job import Job

if TYPE_CHECKING:
    from fastmode.gateway.cassettes.scoped import TestCassette


class TurnLike(Protocol):
    """What the hooks read and set of a turn (``gateway.pipeline.turn.Turn``)."""

    protocol: WireProtocol
    req: Any
    ctx: RequestContext
    transport: str
    fault: Any
    tape: Tape | None

    @property
    def request(self) -> Any: ...


class Cassettes:
    def __init__(self, config: Config, engine: EngineAdmission,
                 tiers: Mapping[str, Tier]) -> None:
        rec = config.record
        self.redactor = Redactor(rec.redact, load_hook(rec.redact_hook))
        self.recorder = Recorder(rec, self.redactor) if rec.dir else None
        self.everything = bool(rec.dir or config.replay.dir)  # not only tests' cassettes
        # the pytest plugin's per-test cassettes (gateway.cassettes.scoped; the admin API)
        self.tests = TestCassettes(rec, self.redactor, engine, tiers)

    def _test(self, turn: TurnLike) -> TestCassette | None:
        decision = getattr(turn, "decision", None)
        return self.tests.get(getattr(decision, "test_id", "") or "")

    def before(self, turn: TurnLike, stream: bool | None) -> None:
        if not self.everything and self._test(turn) is None:
            current.set(None)  # nothing to match or record (and no earlier turn's wire)
            return
        name = turn.protocol.name
        current.set(Wire(name, normalised(name, turn.req), turn.ctx.fast_path,
                         turn.request.stream if stream is None else stream, turn.ctx.headers,
                         asyncio.get_running_loop().time()))

    def after(self, turn: TurnLike, job: Job, encoder: Encoder) -> Encoder:
        if isinstance(job, ReplayJob) and job.recording is not None:
            return CassetteEncoder(encoder, job.recording)
        wire = current.get()
        if turn.fault is not None or wire is None:
            return encoder
        test = self._test(turn)
        recorder = test.recorder if test is not None and test.recorder else self.recorder
        if recorder is not None:
            turn.tape = recorder.tape(wire, job, turn.transport, encoder.sse)
        return encoder


def install(config: Config, engine: EngineAdmission, tiers: Mapping[str, Tier],
            backends: dict[str, Admission]) -> Cassettes | None:
    """The hooks of an app (None when neither recording nor replaying, nor the admin API on
    for tests' cassettes); with ``[replay]``, the replay backend serves every tier
    (ValueError: a cassette or setting that cannot)."""
    if not config.record.dir and not config.replay.dir and not config.admin.enabled:
        return None
    hooks = Cassettes(config, engine, tiers)
    if config.replay.dir:
        library = Library.load(config.replay, hooks.redactor)
        replay = ReplayAdmission(library, config.replay, engine, tiers)
        backends.update(dict.fromkeys(tiers, replay))
    return hooks
