"""The recorded exchanges of a cassette directory, loaded once, and the lookup of a request.

Every worker process loads the directory itself when its app is built (read-only: nothing is
shared or written while replaying), so ``--workers`` replays alike from every worker. Requests
that match several recorded exchanges (the same request recorded twice) get them in turn, in
the order of the files and lines, cycling; the turn is counted per process.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastmode.gateway.cassette_config import ReplayConfig
from fastmode.gateway.cassettes.matching import (
    canonical,
    differences,
    ignoring,
    last_user,
    shown,
    validated,
)
from fastmode.gateway.cassettes.streams import read as transcript
from fastmode.gateway.cassettes.transcript import Transcript
from fastmode.gateway.errors import APIError
from fastmode.gateway.observe.exchange_format import Entry, Redactor, read


@dataclass(frozen=True)
class Wire:
    """A live request as the matchers see it (set by the turn before admission)."""

    protocol: str
    body: dict[str, Any]  # normalised (``matching.normalised``), not yet redacted
    fast: bool
    stream: bool
    headers: Mapping[str, str]
    began: float = 0.0  # loop time the turn began (a recording's times count from here)


# the request being admitted: the replay backend reads it (its ticket carries the translated
# request, not the wire's body)
current: ContextVar[Wire | None] = ContextVar("fastmode_cassette_wire", default=None)


@dataclass
class Recording:
    """One loaded exchange: where it is, what it says, and how it is matched."""

    where: str  # file:line
    entry: Entry
    transcript: Transcript
    body: dict[str, Any]  # normalised and redacted, before ``ignore``


class CassetteError(ValueError):
    """A cassette directory that cannot be replayed; the message names the file and line."""


class Library:
    def __init__(self, config: ReplayConfig, redactor: Redactor) -> None:
        self.config = config
        self.redactor = redactor
        self.recordings: list[Recording] = []
        self._index: dict[tuple[Any, ...], list[Recording]] = {}
        self._turn: dict[tuple[Any, ...], int] = {}

    @classmethod
    def load(cls, config: ReplayConfig, redactor: Redactor) -> Library:
        """Every entry of ``config.dir``: CassetteError on the first that cannot be served,
        including one that ``fastmode replay-check`` rejects (which lists them all)."""
        lib = cls(config, redactor)
        if not Path(config.dir).is_dir():
            raise CassetteError(f"replay: {config.dir} is not a directory")
        for line in read(config.dir):
            if line.entry is None:
                raise CassetteError(f"replay: {line.where}: {line.error}")
            lib.add(line.where, line.entry)
        return lib

    def add(self, where: str, entry: Entry) -> Recording:
        try:
            body = self.redactor.request(entry.protocol,
                                         validated(entry.protocol, entry.request))
        except APIError as exc:
            raise CassetteError(f"replay: {where}: request: {exc.message}") from None
        tr = transcript(entry)
        if tr.job_id(entry.protocol) is None:
            raise CassetteError(f"replay: {where}: the response has no id")
        if tr.problems:  # what replay-check rejects is never served
            more = f" (and {len(tr.problems) - 1} more)" if len(tr.problems) > 1 else ""
            raise CassetteError(f"replay: {where}: {tr.problems[0]}{more}; `fastmode "
                                "replay-check DIR` lists every problem")
        rec = Recording(where, entry, tr, body)
        self.recordings.append(rec)
        self._index.setdefault(self._key(entry.protocol, entry.fast, entry.stream, body,
                                         entry.headers), []).append(rec)
        return rec

    def _key(self, protocol: str, fast: bool, stream: bool, body: dict[str, Any],
             headers: Mapping[str, str]) -> tuple[Any, ...]:
        match = self.config.match
        value: Any
        if match == "body":
            value = canonical(ignoring(body, self.config.ignore))
        elif match == "last_user":
            value = last_user(protocol, body)
        else:
            value = headers.get(self.config.header)
        return (protocol, fast, stream, value)

    def _body(self, wire: Wire) -> dict[str, Any]:
        """The request as its recording was written: redacted alike."""
        return self.redactor.request(wire.protocol, wire.body)

    def find(self, wire: Wire) -> Recording | None:
        key = self._key(wire.protocol, wire.fast, wire.stream, self._body(wire), wire.headers)
        if key[-1] is None:
            return None
        hits = self._index.get(key)
        if not hits:
            return None
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        return hits[turn % len(hits)]

    def miss(self, wire: Wire) -> APIError:
        """A 404 for an unmatched request, naming the nearest recorded exchange and how it
        differs (or saying there is none for the protocol)."""
        kind = f"{wire.protocol}, {'streamed' if wire.stream else 'not streamed'}"
        how = {"body": "body", "last_user": "last user message",
               "header": f"{self.config.header} header"}[self.config.match]
        head = f"No recorded exchange in {self.config.dir} matches this request ({kind}, " \
               f"matched by {how})."
        same = [r for r in self.recordings if r.entry.protocol == wire.protocol]
        if not same:
            return _miss(f"{head} The cassettes hold no {wire.protocol} exchange.")
        mine = ignoring(self._body(wire), self.config.ignore)
        scored = [(len(differences(ignoring(r.body, self.config.ignore), mine)) +
                   (r.entry.stream != wire.stream) + (r.entry.fast != wire.fast), r)
                  for r in same]
        score, near = min(scored, key=lambda s: s[0])
        diffs = differences(ignoring(near.body, self.config.ignore), mine)
        notes = []
        if diffs:
            path, was, now = diffs[0]
            more = f" and {len(diffs) - 1} other field(s)" if len(diffs) > 1 else ""
            notes.append(f"differs at {path}: recorded {shown(was)}, sent {shown(now)}{more}")
        if near.entry.stream != wire.stream:
            notes.append("was recorded " + ("streamed" if near.entry.stream else
                                            "not streamed"))
        if near.entry.fast != wire.fast:
            notes.append("was recorded on " + ("/fast/v1" if near.entry.fast else "/v1"))
        if self.config.match == "header":
            notes.append(f"has {self.config.header}: "
                         f"{near.entry.headers.get(self.config.header)!r}, the request "
                         f"{wire.headers.get(self.config.header)!r}")
        detail = "; ".join(notes) or "matches on everything the matcher ignores"
        return _miss(f"{head} Nearest: {near.where} (id {near.entry.id}), which {detail}.")


def _miss(message: str) -> APIError:
    return APIError(404, message, code="cassette_miss")
