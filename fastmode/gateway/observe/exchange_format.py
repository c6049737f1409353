"""The cassette format, version 1: one JSON object per line, one exchange per object.

A cassette is any ``*.jsonl`` file in the cassette directory (a recording gateway writes one
file per process: workers never interleave their lines). Each line is self-describing, so
files can be concatenated, split, reordered and edited by hand::

    {"version": 1, "id": "…", "protocol": "chat", "fast": false, "stream": true,
     "transport": "sse", "request": {…the normalised request body…},
     "headers": {"x-request-id": "…"}, "status": 200,
     "events": [{"t": 0.0021, "data": {…}}, …, {"t": 0.31, "raw": "[DONE]"}],
     "recorded": {"at": "2025-01-01T00:00:00Z", "tier": "standard", …}}

- ``events`` (streamed) are what the gateway sent its client, one item per SSE event or
  websocket frame: ``t`` seconds after the request, ``event`` the SSE event name (absent for
  Chat and Completions, whose SSE has none), ``data`` the event's JSON, or ``raw`` for a body
  that is not JSON (Chat's ``[DONE]``). A non-streamed exchange has ``body`` and ``t`` instead.
- The data is stored as JSON values, not bytes: readable and editable, and written back with
  the same serializer the gateway uses, so the bytes are the recorded ones. An event whose bytes
  would not come back identical is stored ``raw``.
- ``recorded`` is free-form information (when, which tier and upstream): never matched on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fastmode.gateway.cassette_config import REDACTED

VERSION = 1
PROTOCOLS = ("chat", "completions", "responses", "messages")


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    t: float = Field(ge=0)
    event: str = ""
    data: Any = None
    raw: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> Event:
        if (self.raw is None) == (self.data is None):
            raise ValueError("an event has exactly one of 'data' (JSON) and 'raw' (text)")
        return self

    def body(self) -> bytes:
        """The event's bytes as they went to the client."""
        return self.raw.encode() if self.raw is not None else orjson.dumps(self.data)


class Entry(BaseModel):
    """One recorded exchange (validated on load; unknown keys are refused, so a typo in a
    hand-edited cassette is an error, not a silently ignored field)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    id: str = Field(min_length=1)
    protocol: Literal["chat", "completions", "responses", "messages"]
    fast: bool = False  # came in on /fast/v1
    stream: bool
    transport: Literal["http", "sse", "websocket"] = "http"
    request: dict[str, Any]
    headers: dict[str, str] = Field(default_factory=dict)
    status: int = 200
    t: float | None = Field(None, ge=0)  # a whole body's arrival, seconds after the request
    body: dict[str, Any] | None = None
    events: list[Event] | None = None
    recorded: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shape(self) -> Entry:
        if self.stream:
            if not self.events:
                raise ValueError("a streamed exchange needs a non-empty 'events' list")
            if self.body is not None:
                raise ValueError("a streamed exchange has 'events', not 'body'")
            times = [e.t for e in self.events]
            if times != sorted(times):
                raise ValueError("event times ('t') must not decrease")
        else:
            if self.body is None:
                raise ValueError("a non-streamed exchange needs 'body'")
            if self.events is not None:
                raise ValueError("a non-streamed exchange has 'body', not 'events'")
        return self


def event_item(t: float, kind: str, body: bytes) -> dict[str, Any]:
    """An event as a cassette stores it: JSON when its bytes come back identical, else raw."""
    item: dict[str, Any] = {"t": round(t, 6)}
    if kind:
        item["event"] = kind
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = None
    if value is not None and orjson.dumps(value) == body:
        item["data"] = value
    else:
        item["raw"] = body.decode()
    return item


def dumps(entry: dict[str, Any]) -> bytes:
    return orjson.dumps(entry) + b"\n"


def files(directory: str | Path) -> list[Path]:
    """The cassette files of a directory, in name order (the order entries are numbered); a
    file: itself (one test's cassette, ``gateway.cassettes.scoped``)."""
    if Path(directory).is_file():
        return [Path(directory)]
    return sorted(p for p in Path(directory).glob("*.jsonl") if p.is_file())


class Line:
    """One line of a cassette file: where it is, and its entry or what is wrong with it."""

    __slots__ = ("path", "number", "entry", "error")

    def __init__(self, path: Path, number: int, entry: Entry | None, error: str | None) -> None:
        self.path, self.number, self.entry, self.error = path, number, entry, error

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.number}"


def read(directory: str | Path) -> Iterator[Line]:
    """Every non-blank line of every cassette of ``directory``, parsed and validated."""
    for path in files(directory):
        with path.open("rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                yield _line(path, number, raw)


def _line(path: Path, number: int, raw: bytes) -> Line:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Line(path, number, None, f"not JSON: {exc}")
    if not isinstance(obj, dict):
        return Line(path, number, None, "not a JSON object")
    if obj.get("version") != VERSION:
        return Line(path, number, None, f"format version {obj.get('version')!r}; this "
                    f"fastmode reads version {VERSION}")
    try:
        return Line(path, number, Entry.model_validate(obj), None)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "entry"
        return Line(path, number, None, f"{loc}: {err['msg']}")


# -- redaction -------------------------------------------------------------------------------

Hook = Callable[[dict[str, Any]], "dict[str, Any] | None"]


class Redactor:
    """The ``[record]`` redaction: patterns replaced in every string, then the hook."""

    def __init__(self, patterns: list[str], hook: Hook | None = None) -> None:
        self.pattern = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
        self.hook = hook

    def strings(self, value: Any) -> Any:
        """``value`` with every match of the patterns in its strings (keys too) replaced."""
        pat = self.pattern
        if pat is None:
            return value
        if isinstance(value, str):
            return pat.sub(REDACTED, value)
        if isinstance(value, dict):
            return {self.strings(k): self.strings(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.strings(v) for v in value]
        return value

    def entry(self, entry: dict[str, Any]) -> dict[str, Any] | None:
        """A whole entry before it is written (None: the hook dropped it)."""
        out = self.strings(entry)
        return self.hook(out) if self.hook is not None else out

    def request(self, protocol: str, body: dict[str, Any]) -> dict[str, Any]:
        """An incoming request, redacted as its recording was (the hook sees an entry with no
        response)."""
        body = self.strings(body)
        if self.hook is None:
            return body
        out = self.hook({"version": VERSION, "protocol": protocol, "request": body})
        return out["request"] if out is not None and isinstance(out.get("request"), dict) \
            else body


def load_hook(spec: str) -> Hook | None:
    """``package.module:function`` imported (ValueError naming what is missing)."""
    if not spec:
        return None
    import importlib

    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"record.redact_hook: cannot load {spec!r}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"record.redact_hook: {spec!r} is not callable")
    hook: Callable[[dict[str, Any]], dict[str, Any] | None] = fn
    return hook
