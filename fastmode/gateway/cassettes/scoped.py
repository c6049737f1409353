"""A test's cassette: its exchanges recorded to one file, or replayed from it.

``fastmode.cassette(path, mode)`` (the pytest plugin) opens one for a test id through
``POST /admin/tests/{test_id}/cassette``; only requests carrying that test id
(``x-fastmode-test-id``) are recorded or replayed, so tests sharing one gateway never see each
other's exchanges. The file is an ordinary cassette (``gateway.observe.exchange_format``: what
``fastmode serve --record`` writes, ``--replay`` and ``fastmode replay-check`` read), matched by
the request body as ``--replay`` does; the test id itself is not in the match (it names the
xdist worker, which differs between runs). The modes are VCR's record modes:

- ``record``: the file is written anew with this test's exchanges (the tier answers);
- ``replay``: every request is answered from the file; one it does not hold gets a 404
  ``cassette_miss`` in the route's format, naming the nearest recorded exchange;
- ``once``: ``replay`` when the file exists and holds exchanges, else ``record``;
- ``new_episodes``: recorded exchanges replayed, the others answered by the tier and appended.

Replayed answers come at once (``timing = "none"``): a test waits for nothing recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fastmode.gateway.cassette_config import RecordConfig, ReplayConfig
from fastmode.gateway.cassettes.library import CassetteError, Library, Recording, Wire
from fastmode.gateway.cassettes.recorder import Recorder
from fastmode.gateway.errors import APIError
from fastmode.gateway.observe.exchange_format import Redactor, read

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fastmode.backends.engine import Tier
    from fastmode.gateway.cassettes.replay import ReplayAdmission
    from fastmode.gateway.engines.engine_admission import EngineAdmission

Mode = Literal["record", "replay", "once", "new_episodes"]
MODES: tuple[str, ...] = ("record", "replay", "once", "new_episodes")
MAX_MISSES = 100  # misses kept per test (what the plugin reports at its end)


@dataclass
class TestCassette:
    path: Path
    mode: str  # as asked
    replay: ReplayAdmission | None  # the file's exchanges (replay, once on a full file, new)
    recorder: Recorder | None  # where this test's exchanges go (record, once on none, new)
    misses: list[str] = field(default_factory=list)  # requests the file did not hold

    @property
    def replaying(self) -> bool:
        return self.replay is not None

    def find(self, wire: Wire | None) -> Recording | None:
        if self.replay is None or wire is None:
            return None
        return self.replay.library.find(wire)

    def miss(self, wire: Wire | None) -> APIError:
        """The 404 of a request the file does not hold (kept for the plugin's report)."""
        if self.replay is None or wire is None:
            err = APIError(404, f"No recorded exchange in {self.path} matches this request.",
                           code="cassette_miss")
        else:
            err = self.replay.library.miss(wire)
        if len(self.misses) < MAX_MISSES:
            self.misses.append(err.message)
        return err

    def as_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "mode": self.mode,
                "replaying": self.replaying, "recording": self.recorder is not None,
                "recorded": self.recorder.written if self.recorder is not None else 0,
                "exchanges": len(self.replay.library.recordings) if self.replay else 0,
                "misses": list(self.misses)}


class TestCassettes:
    """Every test's open cassette, by test id."""

    def __init__(self, record: RecordConfig, redactor: Redactor, engine: EngineAdmission,
                 tiers: Mapping[str, Tier]) -> None:
        self.record = record
        self.redactor = redactor
        self.engine = engine
        self.tiers = tiers
        self.open_: dict[str, TestCassette] = {}

    def get(self, test_id: str) -> TestCassette | None:
        return self.open_.get(test_id) if test_id and self.open_ else None

    def open(self, test_id: str, path: str, mode: str) -> TestCassette:
        """The test's cassette (replacing one it had); CassetteError: a file that cannot be
        replayed (its file:line and why), or ``replay`` of a file that does not exist."""
        from fastmode.gateway.cassettes.replay import ReplayAdmission

        file = Path(path)
        if file.is_dir() or file.suffix != ".jsonl":
            raise CassetteError(f"cassette: {path}: expected a .jsonl file")
        full = file.is_file() and file.stat().st_size > 0
        if mode == "replay" and not full:
            raise CassetteError(f"cassette: {path}: no recorded exchange to replay (record "
                                "it first: mode 'record' or 'once')")
        replays = mode in ("replay", "new_episodes") or (mode == "once" and full)
        records = mode in ("record", "new_episodes") or (mode == "once" and not full)
        replay = None
        if replays and full:
            config = ReplayConfig(dir=str(file), timing="none", miss="error")
            library = Library(config, self.redactor)
            for line in read(file):
                if line.entry is None:
                    raise CassetteError(f"cassette: {line.where}: {line.error}")
                library.add(line.where, line.entry)
            replay = ReplayAdmission(library, config, self.engine, self.tiers)
        recorder = None
        if records:
            file.parent.mkdir(parents=True, exist_ok=True)
            if mode in ("record", "once"):
                file.write_bytes(b"")  # written anew
            recorder = Recorder(self.record.model_copy(update={"dir": str(file.parent)}),
                                self.redactor)
            recorder.path = file
        cassette = TestCassette(file, mode, replay, recorder)
        self.open_[test_id] = cassette
        return cassette

    def clear(self, test_id: str) -> bool:
        return self.open_.pop(test_id, None) is not None
