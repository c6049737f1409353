"""Work that grows with a request's size runs off the event loop.

One event loop serves every connection of a gateway process: while it parses a 16 MB body or
counts the tokens of a 15-million-token prompt, nothing else moves, ``/healthz`` included. So a
request whose body is over ``OFFLOAD_BYTES`` is parsed, bounds-checked (``gateway.http.limits``),
validated and translated (tokenized) in a worker thread; smaller ones stay inline, where the
thread hop (~50 us) would cost more than the work.

A thread alone is not enough: the GIL is held for the whole of any one C call (a regular
expression, ``orjson.loads``, a pydantic validation). What keeps the loop's stalls short is that
the long calls are bounded too: the tokenizer counts long texts in chunks and stops once a
prompt is past the largest context window served (``backends.tokenizer.prompt_budget``), the
limits refuse too many messages, tools, content parts or enum values before anything walks
them, a body's JSON values are counted before it is parsed (``limits.max_json_values``), and
the mock model reads a bounded window of the user's text for its cues. The pool has
``WORKERS`` threads: more heavy requests at once wait their turn instead of competing for the
GIL (and memory).

The residual (``bench/hostile.py``, docs/reliability.md): ``orjson.loads`` of a body at the
values bound is one C call of ~0.1-0.2 s.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import orjson

from fastmode.backends.tokenizer import PromptTooLong, prompt_budget
from fastmode.gateway.config import LimitsConfig
from fastmode.gateway.errors import APIError
from fastmode.gateway.http.json_body import parse_json
from fastmode.gateway.http.limits import check_json_values, check_request

OFFLOAD_BYTES = 64 * 1024  # bodies (or websocket frames) larger than this leave the loop
WORKERS = 2

T = TypeVar("T")
_pool: ThreadPoolExecutor | None = None
# the parameter a prompt's length is refused on, per protocol
_PROMPT_PARAM = {"responses": "input", "completions": "prompt"}


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="fastmode-request")
    return _pool


async def off_loop(size: int, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``: inline if ``size`` (bytes of the request) is small, else in the
    pool (with the caller's context variables); exceptions propagate either way."""
    if size <= OFFLOAD_BYTES:
        return fn(*args, **kwargs)
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor(), call)


def parse_body(raw: bytes, limits: LimitsConfig | None = None) -> dict[str, Any]:
    """``parse_json`` of a body whose values were counted first (``check_json_values``), with
    the cyclic GC paused: a body of a million small arrays would otherwise trigger a
    collection every 700 of them (3x the parse's own time)."""
    if len(raw) <= OFFLOAD_BYTES:
        return parse_json(raw)
    if limits is not None:
        check_json_values(raw, limits.max_json_values)
    if not gc.isenabled():
        return parse_json(raw)
    gc.disable()
    try:
        return parse_json(raw)
    finally:
        gc.enable()


def parse_frame(text: str, limits: LimitsConfig) -> Any:
    """A websocket frame's JSON, bounded and parsed as ``parse_body`` does a body's."""
    if len(text) <= OFFLOAD_BYTES:
        return orjson.loads(text)
    check_json_values(text.encode(), limits.max_json_values)
    gc.disable()
    try:
        return orjson.loads(text)
    finally:
        gc.enable()


class Validates(Protocol):
    """What a protocol plug-in offers here: its name (the bounds differ per protocol) and
    the validation of a body into its request model."""

    @property
    def name(self) -> str: ...

    def validate(self, body: dict[str, Any]) -> Any: ...


def validated(protocol: Validates, raw: bytes, limits: LimitsConfig,
              caller: str | None = None) -> Any:
    """The raw body parsed, bounds-checked and validated: the protocol's request model."""
    return checked(protocol, parse_body(raw, limits), limits, raw, caller)


def checked(protocol: Validates, body: dict[str, Any], limits: LimitsConfig,
            raw: bytes | None = None, caller: str | None = None) -> Any:
    """A parsed body (from ``raw``, if given) bounds-checked (``gateway.http.limits``) and
    validated; ``caller`` (``caller_of``): whose checks of its tool schemas are remembered."""
    check_request(protocol.name, body, limits, raw, caller)
    return protocol.validate(body)


def prompt_too_long(protocol: str, exc: PromptTooLong) -> APIError:
    return APIError(
        400, f"The prompt is longer than the largest context window served here "
        f"({exc.limit} tokens): counting stopped at {exc.counted} tokens. Please reduce the "
        "length of the messages.", param=_PROMPT_PARAM.get(protocol, "messages"),
        code="context_length_exceeded")


def counted(max_context: int, protocol: str, fn: Callable[..., T], *args: Any,
            caller: str | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` — a translation (``Turn(...)``, ``protocol.translate``) — with
    its prompt counting bounded by ``max_context``, the largest context window served (the
    engine spec's ``max_context_window``): a longer prompt is a 400 in
    ``protocol``'s words as soon as counting passes it. ``caller``: the credentials the
    request came with (``caller_of``), under which the counts of its long texts are
    remembered for its next turns (``backends.tokenizer.prompt_budget``)."""
    try:
        with prompt_budget(max_context, caller):
            return fn(*args, **kwargs)
    except PromptTooLong as exc:
        raise prompt_too_long(protocol, exc) from None


def caller_of(headers: Mapping[str, str]) -> str:
    """Whose counts a request's are: its credentials as sent (an OpenAI-style bearer token,
    Anthropic's ``x-api-key``), or "" for a request without any."""
    return headers.get("authorization") or headers.get("x-api-key") or ""
