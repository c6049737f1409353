"""The contract between a job and what produces its tokens: the engine or an upstream.

An in-process job's tokens come from the engine's ``TokenStream`` (``backends.drivers``),
paced by the scheduler; a remote job's from an ``UpstreamStream`` (``gateway.remote``), as the
upstream's bytes arrive. The turn pipeline, the encoders, settlement and ``time_info`` read
both through these two protocols and nothing else, so neither kind is special-cased after
admission. ``Reply`` is the reply's side (the mock model's ``Generation``, or the upstream's
``LiveReply`` that grows as it streams); ``TokenSource`` is the pacing side.

Push mode (``gateway.pipeline.push``: token events written from inside the engine's step) is the one
capability only the engine has; the turn asks for it with ``isinstance(stream, TokenStream)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, Protocol

from fastmode.backends.mockmodel import Piece, Reasoning, ToolCall


class Reply(Protocol):
    @property
    def pieces(self) -> Sequence[Piece]: ...
    @property
    def text(self) -> str: ...
    @property
    def tool_calls(self) -> Sequence[ToolCall]: ...
    @property
    def finish_reason(self) -> str: ...
    @property
    def stop_sequence(self) -> str | None: ...
    @property
    def reasoning(self) -> Reasoning | None: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def reasoning_tokens(self) -> int: ...


class SeqView(Protocol):
    """A request's state and modeled (or observed) times, on the source's clock."""

    @property
    def state(self) -> str: ...  # backends.scheduler: waiting, prefill, decode, ...
    @property
    def arrival(self) -> float: ...
    @property
    def admitted_at(self) -> float: ...
    @property
    def first_token_at(self) -> float: ...
    @property
    def finished_at(self) -> float: ...


class TokenSource(Protocol):
    """How many tokens are new, when each was (or is due to be) produced, and how to stop.

    ``take`` hands out the tokens produced since the last call; ``ready`` is what to await for
    more (None once the source ended); ``interval`` (tokens per event, the tier's
    ``stream_interval``) is fixed when the source is made."""

    delivered: int
    since: float  # a lower bound of ``due_at`` of what is still to take (the lag check)
    tag: Any  # what the engine-side metrics read (the job)

    @property
    def seq(self) -> SeqView: ...
    @property
    def interval(self) -> int: ...
    @property
    def last_at(self) -> float: ...
    @property
    def watched_at(self) -> float: ...  # when the ``watch``-th token came (-1: not yet)

    def take(self) -> int: ...
    def ready(self) -> Awaitable[None] | None: ...
    def token_at(self, k: int) -> float: ...
    def due_at(self, start: int, count: int) -> float: ...
    def produced(self) -> int: ...  # tokens produced so far (delivered or in flight)
    def host_lag(self) -> tuple[float, float]: ...  # seconds the host added: all, completion
    def cancel(self) -> None: ...
    def __aiter__(self) -> AsyncIterator[int]: ...
