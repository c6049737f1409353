"""The recorded events of an exchange, handed out as its protocol's encoder hands out its own.

A replayed job's stream counts recorded events (``replay_stream``); this encoder makes unit
``i`` the i-th recorded event, so the turn pipeline (SSE framing by the protocol's rule, one
websocket frame per event, faults, the lag check, settlement) runs unchanged and the bytes are
the recorded ones. Everything that is not the wire — what a protocol's ``completed`` reads to
keep a conversation (the Responses API's ``rid`` and ``response``), an error or a cancel in the
middle of a replay — is the protocol's own encoder's, built for the same job: the job has the
recorded id and reply, so what it keeps is what was recorded.
"""

from __future__ import annotations

from typing import Any

from fastmode.gateway.cassettes.library import Recording
from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.base import Encoder
from fastmode.gateway.protocols.events import Frames, sse_framed, texts


class CassetteEncoder(Encoder):
    opening_at_first_token = False  # the recorded first event is sent at its recorded time

    def __init__(self, inner: Encoder, recording: Recording) -> None:
        self.inner = inner
        self.job = inner.job
        entry = recording.entry
        self.events: Frames = [(e.event, e.body()) for e in entry.events or ()]
        self.whole = entry.body
        self.sent = 0  # recorded events handed out

    def __getattr__(self, name: str) -> Any:  # only for what this class does not define
        return getattr(self.inner, name)

    def opening(self) -> Frames:
        return []

    def tokens(self, start: int, count: int) -> Frames:
        self.sent = min(start + count, len(self.events))  # handed out, in order
        return self.events[start:start + count]

    def closing(self) -> Frames:
        return []

    def body(self) -> dict[str, Any]:
        assert self.whole is not None, "a streamed recording has no body"
        return self.whole

    def failed(self, error: APIError) -> Frames:
        """The protocol's error event after the recorded events sent (an injected fault, a
        shutdown): numbered after them where the protocol numbers its events."""
        if isinstance(getattr(self.inner, "seq", None), int):  # the Responses API
            setattr(self.inner, "seq", self.sent)  # noqa: B010 (an attribute of that encoder)
        return self.inner.failed(error)

    def cancelled(self) -> Frames:
        return self.inner.cancelled()

    def framed(self, frames: Frames) -> list[bytes]:  # SSE lines by the protocol's rule
        return sse_framed(frames, self.inner.named_events)

    def ran_ahead(self) -> int | None:
        return None

    def sse_tokens(self, start: int, count: int) -> bytes:
        return self.sse(self.tokens(start, count))

    def wire_chunks(self) -> bool:
        return False  # its events are made as they are asked for (``chunk_tokens`` frames them)

    def text_tokens(self, start: int, count: int) -> list[str]:
        return texts(self.tokens(start, count))

    def frame_tokens(self, start: int, count: int) -> Frames:
        return self.tokens(start, count)
