"""The streaming hot path of every encoder: token events encoded ahead and sent as slices, and
``stream_interval`` grouping (several tokens in one event).

An encoder's ``tokens(start, count)`` is the reference for what goes on the wire: stateful
(sequence numbers, open items, partial text) and called in order. Calling it once per token
batch costs, per event, a Python call, a list and a framing join. ``EventBuffer`` calls it for a
run of tokens at a time (``AHEAD``), ahead of the stream, learns which events belong to which
token from ``Encoder.pieces`` (the loop every encoder's ``tokens`` runs on, which records where
each token's events start), and frames them once: SSE bytes, or the frames the websocket sends.
A batch of tokens is then a slice. The reply is whole from admission on (the mock model wrote
it), so encoding ahead changes nothing that is sent, only when the work is done; the buffer
holds one run at a time, so memory does not grow with the reply. An encoder that ran ahead of
the stream is rebuilt and replayed up to what was sent if the stream ends early
(``gateway.pipeline.turn``), so a ``failed`` or ``cancelled`` event carries what the client saw.

Grouping (``interval`` N > 1): tokens ``g*N .. g*N+N-1`` form group g; ``pieces`` merges
consecutive tokens of one group that are of one kind (visible text, or the arguments of one tool
call) into one piece at the index of the last of them, so the encoder makes one event of them.
A change of kind inside a group makes two events. Reasoning tokens are never merged: their
events are tied to token indices (the start and end of a thinking block, summary parts).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any, Protocol

from fastmode.backends.mockmodel import TEXT, Generation, Piece

Frames = list[tuple[str, bytes]]  # (event type, JSON body) pairs: one protocol event each


class Encoder(Protocol):
    """What the buffer drives of an encoder (``gateway.protocols.base.Encoder``); a protocol
    here so that this module does not import the one that imports it."""

    job: Any
    interval: int
    sse_wire: bool
    chunk_wire: bool
    marks: list[tuple[int, int]] | None
    buffer: EventBuffer | None

    def tokens(self, start: int, count: int) -> Frames: ...
    def framed(self, frames: Frames) -> list[bytes]: ...
    def chunk_framed(self, frames: Frames) -> list[bytes]: ...

AHEAD = 64  # tokens encoded per run: a few microseconds of work before a first token
# Streams admitted in one engine step stay in step: with runs of AHEAD tokens each, all of them
# would encode their next run inside the same step, every AHEAD steps (32 spark streams on a
# replica: ~1.7 ms at once, past the pacing tolerance with two replicas, so the replicas
# slipped every ~58 ms). A buffer's first run is shorter by a share of AHEAD that differs from
# one buffer to the next, so streams that start together refill on different steps.
_STAGGER = itertools.count()
_STAGGER_STEP = 37  # coprime with the number of groups in a run: the shares go round them all
_RECORDS: dict[type, bool] = {}  # encoder class -> its tokens() loops on `pieces` (marks)


class Merged:
    """Several tokens of one kind as one piece (what ``Piece`` has, without a frozen
    dataclass's construction cost: one of these per grouped event)."""

    __slots__ = ("text", "tool")

    def __init__(self, text: str, tool: int) -> None:
        self.text = text
        self.tool = tool


class Runs:
    """A whole reply's pieces laid out once for grouping: kinds, and all texts in one string
    with each piece's offset, so a group of one kind is one ``count`` and one slice (C speed)
    instead of a Python step per token."""

    __slots__ = ("tools", "text", "offsets")

    def __init__(self, pieces: Sequence[Piece]) -> None:
        texts = [p.text for p in pieces]
        self.tools = [p.tool for p in pieces]
        self.text = "".join(texts)
        self.offsets = [0, *accumulate(map(len, texts))]


_LAID_OUT: dict[int, tuple[Sequence[Piece], Runs]] = {}  # id(pieces) -> (pieces, their runs)


def runs_of(pieces: Sequence[Piece]) -> Runs:
    """A reply's ``Runs``, laid out once per reply *object*: a scripted reply is one shared,
    immutable Generation (``backends.mockmodel.scripts``), so a load test of one script lays
    it out once, not once per request. The newest 32 are kept (with the pieces themselves, so
    an id is not reused while its entry lives)."""
    hit = _LAID_OUT.get(id(pieces))
    if hit is not None and hit[0] is pieces:
        return hit[1]
    runs = Runs(pieces)
    if isinstance(pieces, tuple):  # immutable: safe to share
        if len(_LAID_OUT) >= 32:
            del _LAID_OUT[next(iter(_LAID_OUT))]
        _LAID_OUT[id(pieces)] = (pieces, runs)
    return runs


def grouped(pieces: Sequence[Piece], start: int, stop: int, interval: int,
            marks: list[tuple[int, int]] | None, out: Frames | None,
            runs: Runs | None = None) -> Iterator[tuple[int, Piece | Merged]]:
    """(index, piece) per event of tokens ``start .. stop`` (see the module docstring); with
    ``marks``, records (index, ``len(out)``) before each, i.e. where that event's frames begin.
    ``runs``: the reply laid out (a reply known whole), for grouping at C speed."""
    stop = min(stop, len(pieces))
    if interval <= 1:
        if marks is None or out is None:
            for i in range(start, stop):
                yield i, pieces[i]
        else:
            for i in range(start, stop):
                marks.append((i, len(out)))
                yield i, pieces[i]
        return
    i = start
    while i < stop:
        piece: Piece | Merged = pieces[i]
        kind = piece.tool
        j = i + 1
        if kind >= TEXT:  # text or tool arguments: merge the run within the group
            end = min(stop, (i // interval + 1) * interval)
            if runs is not None and runs.tools[i:end].count(kind) == end - i:
                if end > j:  # the whole rest of the group is of this kind (the usual case)
                    offsets = runs.offsets
                    piece = Merged(runs.text[offsets[i]:offsets[end]], kind)
                    j = end
            elif j < end and pieces[j].tool == kind:
                texts = [piece.text]
                while j < end:
                    p = pieces[j]
                    if p.tool != kind:
                        break
                    texts.append(p.text)
                    j += 1
                piece = Merged("".join(texts), kind)
        if marks is not None and out is not None:
            marks.append((j - 1, len(out)))
        yield j - 1, piece
        i = j


class EventBuffer:
    """The events of one reply's tokens, encoded ``AHEAD`` tokens at a time; see the module.

    Its encoder holds it and hands itself to each call that encodes (``span``): the buffer
    keeps no reference back, so the two are not a reference cycle and are freed with the turn
    by reference counting, not left to the cyclic collector (every request would feed it)."""

    __slots__ = ("total", "encoded", "served", "tok0", "frames", "wire", "index",
                 "mode", "per_token", "ahead", "short")

    def __init__(self, enc: Encoder, total: int) -> None:
        self.total = total
        self.encoded = 0  # tokens whose events were made (sent or in the buffer)
        self.served = 0  # tokens whose events were handed to the transport
        # a run is whole groups of ``interval`` tokens: runs never split an event
        self.ahead = -(-AHEAD // enc.interval) * enc.interval
        groups = self.ahead // enc.interval
        # tokens the first run is short by: 0 .. ahead - interval, whole groups (_STAGGER)
        self.short = (next(_STAGGER) * _STAGGER_STEP % groups) * enc.interval
        self.tok0 = 0  # the first token still in the buffer
        self.frames: Frames = []  # events of tokens tok0 .. encoded
        # the same events as the transport writes them (``mode``): SSE bytes, each as an HTTP
        # chunk of its SSE bytes, or the text of each websocket frame; made with the frames, a
        # run at a time
        self.wire: list[Any] = []
        self.index = [0]  # index[t - tok0]: where token t's events begin in frames
        self.mode: str | None = None  # "sse" | "chunk" | "text" once asked (``wired``)
        # does the encoder record marks? None until seen (one token at a time until then)
        self.per_token: bool | None = None if type(enc) not in _RECORDS else not _RECORDS[
            type(enc)]

    def span(self, enc: Encoder, start: int, stop: int) -> tuple[int, int]:
        """Frame positions of tokens ``start .. stop`` (encoded by ``enc``, the encoder that
        holds this buffer); tokens are asked for in order. A reply with no tokens (a warm-up,
        a stop sequence at the very start) still takes the engine one step: its one token
        has no events."""
        stop = min(stop, self.total)
        start = min(start, stop)
        if start < self.tok0 or start > self.encoded:
            raise RuntimeError("token events must be asked for in order")
        if stop > self.encoded:
            self._refill(enc, start, stop)
        self.served = stop
        t0, index = self.tok0, self.index
        return index[start - t0], index[stop - t0]

    def _refill(self, enc: Encoder, start: int, stop: int) -> None:
        if start > self.tok0:  # drop what was sent
            f = self.index[start - self.tok0]
            del self.frames[:f]
            del self.wire[:f]
            self.index = [x - f for x in self.index[start - self.tok0:]]
            self.tok0 = start
        a = self.encoded
        b = min(self.total, max(stop, a + self.ahead - self.short))
        self.short = 0
        base = len(self.frames)
        if self.per_token is None:
            new, pos = self._probe(enc, a, b)
        elif self.per_token:
            new, pos = self._one_by_one(enc, a, b)
        else:
            new, pos = self._run(enc, a, b)
        self.frames += new
        mode = self.mode
        if mode is not None:
            self.wire += (enc.framed(new) if mode == "sse" else enc.chunk_framed(new)
                          if mode == "chunk" else texts(new))
        index = self.index
        index.pop()  # token a's entry is recomputed (it is `base`)
        index += [base + p for p in pos]
        index.append(base + len(new))
        self.encoded = b

    def _run(self, enc: Encoder, a: int, b: int) -> tuple[Frames, list[int]]:
        """One ``tokens`` call for the run; token t's events begin at the first event recorded
        for a token >= t (token a: at the run's start, with anything made before the loop)."""
        marks: list[tuple[int, int]] = []
        enc.marks = marks
        try:
            new = enc.tokens(a, b - a)
        finally:
            enc.marks = None
        if len(marks) == b - a:  # a mark per token (interval 1): each token's own
            pos = [p for _, p in marks]
            pos[0] = 0
            return new, pos
        pos, prev = [0], a  # tokens prev+1 .. i begin with the event marked at i
        for i, p in marks:
            if i > prev:
                pos += [p] * (i - prev)
                prev = i
        pos += [len(new)] * (b - 1 - prev)  # after the last mark: with the run's last events
        return new, pos

    def _probe(self, enc: Encoder, a: int, b: int) -> tuple[Frames, list[int]]:
        """Event by event until one makes frames: then it is known whether the encoder's
        ``tokens`` records marks (loops on ``pieces``); if not, it stays event by event."""
        new: Frames = []
        pos: list[int] = []
        for t, n in _events_of(enc.interval, a, b):
            pos += [len(new)] * n
            if self.per_token is None:
                marks: list[tuple[int, int]] = []
                enc.marks = marks
                try:
                    got = enc.tokens(t, n)
                finally:
                    enc.marks = None
                if got:
                    self.per_token = _RECORDS.setdefault(type(enc), bool(marks)) is False
            else:
                got = enc.tokens(t, n)
            new += got
        return new, pos

    def _one_by_one(self, enc: Encoder, a: int, b: int) -> tuple[Frames, list[int]]:
        """A ``tokens`` call per event (its ``interval`` tokens): an encoder that records no
        marks still groups as it would for the whole run."""
        new: Frames = []
        pos: list[int] = []
        for t, n in _events_of(enc.interval, a, b):
            pos += [len(new)] * n
            new += enc.tokens(t, n)
        return new, pos


def _events_of(interval: int, a: int, b: int) -> Iterator[tuple[int, int]]:
    """(first token, tokens) of each event of tokens ``a .. b``: groups of ``interval``
    tokens, on their boundaries."""
    step = max(1, interval)
    t = a
    while t < b:
        end = min(b, (t // step + 1) * step)
        yield t, end - t
        t = end


def wired(enc: Encoder, mode: str) -> EventBuffer | None:
    """The encoder's buffer, keeping its events as ``mode`` writes them ("sse": SSE bytes,
    "chunk": each event's SSE bytes as one HTTP/1.1 chunk, "text": websocket frame texts) from
    now on; None as for ``buffered``."""
    buf = buffered(enc)
    if buf is not None and buf.mode != mode:
        buf.mode = mode
        enc.sse_wire = mode != "text"  # its text deltas framed from now on
        enc.chunk_wire = mode == "chunk"  # ... and, where it can, chunked with them
        buf.wire = (enc.framed(buf.frames) if mode == "sse" else enc.chunk_framed(buf.frames)
                    if mode == "chunk" else texts(buf.frames))
    return buf


def texts(frames: Frames) -> list[str]:
    """Each event as the text of its websocket frame (decoded once, a run at a time)."""
    return [body.decode() for _, body in frames]


def buffered(enc: Encoder) -> EventBuffer | None:
    """The encoder's buffer, made on first use; None for a reply still arriving (a remote
    tier's): its events are made as its tokens come."""
    buf = enc.buffer
    if buf is None:
        gen = enc.job.gen
        if not isinstance(gen, Generation):
            return None
        buf = enc.buffer = EventBuffer(enc, gen.output_tokens)
    return buf


_NAMED: dict[str, bytes] = {}  # event type -> its SSE lines' beginning
WIRE = "\x00wire"
"""The kind of an event whose body is its SSE bytes already: an encoder whose stream goes out
as SSE (``Encoder.sse_wire``) writes its text deltas framed, saving a second copy per token."""
CHUNK = "\x00chunk"
"""The kind of an event whose body is its HTTP/1.1 chunk already (its size line, its SSE
bytes, CRLF): an encoder whose events the connection writes itself (``Encoder.chunk_wire``,
``gateway.edge.connections.DirectResponse``) builds its text deltas so, in one join, where
framing each write would copy the event again (~1,000 instructions per token)."""
CHUNK_HEADS = [b"%x\r\n" % n for n in range(4096)]
"""A chunk's size line, by size (the events of a token are far shorter)."""


def chunk_head(size: int) -> bytes:
    """The size line of a chunk of ``size`` bytes."""
    return CHUNK_HEADS[size] if size < 4096 else b"%x\r\n" % size


def chunked(body: bytes) -> bytes:
    """``body`` as one HTTP/1.1 chunk; nothing for no bytes (an empty chunk ends a body)."""
    return b"".join((chunk_head(len(body)), body, b"\r\n")) if body else b""


def unchunked(chunk: bytes) -> bytes:
    """The bytes a chunk carries (``chunked`` undone)."""
    return chunk[chunk.index(b"\r\n") + 2:-2] if chunk else b""


def sse_head(kind: str, named: bool) -> bytes:
    """What comes before an event's JSON body in SSE."""
    return b"event: " + kind.encode() + b"\ndata: " if named else b"data: "


def sse_framed(frames: Frames, named: bool) -> list[bytes]:
    """Each event as SSE: ``event:`` and ``data:`` lines, or ``data:`` alone (Chat); a
    ``WIRE`` event as it is, a ``CHUNK`` event's SSE bytes out of its chunk."""
    if not named:
        return [body if kind is WIRE else unchunked(body) if kind is CHUNK
                else b"data: " + body + b"\n\n" for kind, body in frames]
    out = []
    for kind, body in frames:
        if kind is WIRE or kind is CHUNK:
            out.append(body if kind is WIRE else unchunked(body))
            continue
        head = _NAMED.get(kind)
        if head is None:
            head = _NAMED[kind] = b"event: " + kind.encode() + b"\ndata: "
        out.append(head + body + b"\n\n")
    return out


def chunk_framed(sse: list[bytes], frames: Frames) -> list[bytes]:
    """Each event as one HTTP/1.1 chunk: a ``CHUNK`` event as it is, any other as its SSE
    bytes in ``sse`` (what the encoder frames of the others, in order) chunked."""
    rest = iter(sse)
    return [body if kind is CHUNK else chunked(next(rest)) for kind, body in frames]
