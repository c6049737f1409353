"""Prompt caching as the providers define it, turned into the engine's ``PrefixKey``.

The engine (``backends.prefix_cache``) keeps prefixes per replica and skips their prefill; this
module says, per protocol, where a prompt may be cut and what each cut is called:

* **OpenAI** (Chat, Responses, Completions): automatic for prompts of 1,024 tokens or more, in
  128-token steps (checkpoints at 1,024, 1,152, ...), ``cached_tokens`` in usage. Cached
  prefixes live ``OPENAI_TTL_S`` unused (OpenAI: "5 to 10 minutes of inactivity"), or 24 h
  with ``prompt_cache_retention: "24h"``. ``prompt_cache_key`` is a routing hint.
* **Anthropic** (Messages): only what ``cache_control`` breakpoints mark is written (at most
  four, on tools, system blocks or message content blocks, or one top-level ``cache_control``
  for the last block); hits are found at the content-block boundaries up to 20 blocks before a
  breakpoint. Writes are billed (``cache_creation_input_tokens``: 1.25x input for the 5-minute
  TTL, 2x for ``ttl: "1h"``), reads at the cached-input price. ``speed`` is part of the key:
  switching speed misses, as Anthropic documents.

The prompt is hashed as *units* in the order providers render it (tools, system, messages):
whole tool definitions and messages for OpenAI, content blocks for Anthropic. A checkpoint's
hash covers every unit up to and including the one the checkpoint falls in, so two prompts share
a checkpoint only when they agree on whole units up to it: a message that differs anywhere is
different from its start (a simplification of token-level matching that never reports a hit
that isn't one). ``cache_control`` markers are not part of the hash, so moving a breakpoint
later still reads what an earlier one wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from hashlib import blake2b
from typing import Any

import orjson

from fastmode.backends.prefix_cache import PrefixKey
from fastmode.backends.tokenizer import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    count_chat_prompt,
    count_tokens,
    tokenize,
)
from fastmode.gateway.errors import bad_request

OPENAI_MIN_TOKENS = 1024  # OpenAI caches prompts of 1,024 tokens or more...
OPENAI_STEP = 128  # ...in 128-token increments
OPENAI_TTL_S = 600.0  # "typically 5 to 10 minutes of inactivity"
OPENAI_EXTENDED_TTL_S = 24 * 3600.0  # prompt_cache_retention: "24h"
ANTHROPIC_MIN_TOKENS = 1024  # the minimum cacheable prompt of Opus / Sonnet
ANTHROPIC_LOOKBACK = 20  # blocks before a breakpoint where hits are looked for
ANTHROPIC_MAX_BREAKPOINTS = 4
ANTHROPIC_TTL_S = {"5m": 300.0, "1h": 3600.0}
# cache-write price as a multiple of the input price (Anthropic's published 1.25x and 2x)
CACHE_WRITE_FACTOR = 1.25
CACHE_WRITE_LONG_FACTOR = 2.0
# above any context window: such a request is refused for its length, so no key is built for it
# (bounds the work a client can cause here)
MAX_CACHEABLE_TOKENS = 2_000_000

_Unit = tuple[int, Any]  # (tokens, value hashed)


def _digest(value: Any) -> bytes:
    return blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str),
                   digest_size=8).digest()


def _chain(prev: bytes, unit: bytes) -> bytes:
    return blake2b(prev + unit, digest_size=8).digest()


def _point(chain: bytes, position: int) -> int:
    return int.from_bytes(blake2b(chain + position.to_bytes(8, "little"),
                                  digest_size=8).digest(), "little")


class _Chain:
    """Units in prompt order: their end positions and the running hash after each."""

    def __init__(self, salt: str, units: Iterable[_Unit]) -> None:
        self.ends: list[int] = []
        self.chains: list[bytes] = []
        chain = blake2b(salt.encode(), digest_size=8).digest()
        pos = 0
        for tokens, value in units:
            pos += tokens
            chain = _chain(chain, _digest(value))
            self.ends.append(pos)
            self.chains.append(chain)
        # the reply priming that ends every prompt: the same tokens whatever the prompt
        self.tail = _chain(chain, b"reply-priming")

    def at(self, position: int, start: int = 0) -> tuple[int, int]:
        """(index of the unit that holds token ``position`` (1-based), hash of the checkpoint
        there); ``start`` is an index to search from (positions only grow)."""
        i = start
        ends = self.ends
        while i < len(ends) and ends[i] < position:
            i += 1
        chain = self.chains[i] if i < len(ends) else self.tail
        return i, _point(chain, position)


# -- OpenAI: automatic, 128-token steps from 1,024 --------------------------------------------


def chat_units(messages: Sequence[Mapping[str, Any]],
               tools: Sequence[Mapping[str, Any]] | None) -> list[_Unit]:
    """Tool definitions, then messages, with the tokens ``count_chat_prompt`` gives each."""
    units: list[_Unit] = []
    for tool in tools or ():
        units.append((count_chat_prompt((), [tool]) - REPLY_PRIMING, ("tool", tool)))
    for m in messages:
        units.append((count_chat_prompt([m]) - REPLY_PRIMING, ("message", m)))
    return units


def chat_prefix(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                prompt_tokens: int, salt: str, cache_key: str | None = None,
                retention: str | None = None) -> PrefixKey | None:
    """``openai_prefix`` of a chat prompt of ``prompt_tokens`` (``count_chat_prompt``): its
    units counted only for a prompt long enough to be cached (a short one is not counted
    twice)."""
    if not OPENAI_MIN_TOKENS < prompt_tokens <= MAX_CACHEABLE_TOKENS:
        return None
    return openai_prefix(chat_units(messages, tools), salt, cache_key, retention, prompt_tokens)


def openai_prefix(units: Sequence[_Unit], salt: str, cache_key: str | None = None,
                  retention: str | None = None, prompt_tokens: int | None = None
                  ) -> PrefixKey | None:
    """OpenAI's automatic caching of a prompt made of ``units`` (``prompt_tokens``: their sum
    and the reply priming, by default); None under 1,024 tokens."""
    if prompt_tokens is None:
        prompt_tokens = sum(t for t, _ in units) + REPLY_PRIMING
    if not OPENAI_MIN_TOKENS < prompt_tokens <= MAX_CACHEABLE_TOKENS:
        return None
    chain = _Chain(salt, units)
    ttl = OPENAI_EXTENDED_TTL_S if retention == "24h" else OPENAI_TTL_S
    points = list(range(OPENAI_MIN_TOKENS, prompt_tokens, OPENAI_STEP))
    hashes = []
    i = 0
    for p in points:
        i, h = chain.at(p, i)
        hashes.append(h)
    n = len(points)
    affinity = None
    if cache_key:
        affinity = int.from_bytes(blake2b(cache_key.encode(), digest_size=8).digest(), "little")
    return PrefixKey(tuple(points), tuple(hashes), (True,) * n, (ttl,) * n,
                     min_tokens=OPENAI_MIN_TOKENS, affinity=affinity)


def text_prefix(prompt: str | Sequence[int], prompt_tokens: int, salt: str,
                cache_key: str | None = None, retention: str | None = None) -> PrefixKey | None:
    """OpenAI's automatic caching of a plain prompt (legacy Completions), at token level: the
    prompt is cut into 128-token chunks, so two prompts share each chunk they agree on."""
    if not OPENAI_MIN_TOKENS < prompt_tokens <= MAX_CACHEABLE_TOKENS:
        return None
    tokens: Sequence[Any] = tokenize(prompt) if isinstance(prompt, str) else prompt
    step = OPENAI_STEP
    units: list[_Unit]
    if isinstance(prompt, str):
        units = [(len(tokens[i:i + step]), "".join(tokens[i:i + step]))
                 for i in range(0, len(tokens), step)]
    else:
        units = [(len(tokens[i:i + step]), list(tokens[i:i + step]))
                 for i in range(0, len(tokens), step)]
    return openai_prefix(units, salt, cache_key, retention, prompt_tokens)


# -- Anthropic: cache_control breakpoints ------------------------------------------------------


def _strip(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _block_tokens(block: Mapping[str, Any]) -> int:
    """A content block's tokens as the prompt count has them (its text, tool input, ...)."""
    if block.get("type") == "text":
        return count_tokens(str(block.get("text") or ""))
    framing = count_chat_prompt([{"role": "", "content": None}])
    return count_chat_prompt([{"role": "", "content": [dict(block)]}]) - framing


def _cache_ttl(control: Any, where: str) -> str:
    """The TTL a ``cache_control`` asks for; a 400 naming the field when it is not valid."""
    if not isinstance(control, Mapping) or control.get("type") != "ephemeral":
        raise bad_request(f"{where}.cache_control: only {{'type': 'ephemeral'}} is supported.",
                          param=f"{where}.cache_control")
    ttl = control.get("ttl", "5m")
    if ttl not in ANTHROPIC_TTL_S:
        raise bad_request(f"{where}.cache_control.ttl: must be '5m' or '1h', got {ttl!r}.",
                          param=f"{where}.cache_control.ttl")
    return str(ttl)


def anthropic_blocks(tools: Sequence[Mapping[str, Any]], system: Any,
                     messages: Sequence[tuple[str, Any]]
                     ) -> tuple[list[_Unit], list[tuple[int, str]]]:
    """The request's blocks in render order (tools, system, messages) as units, and its
    breakpoints as (index of the block, ttl)."""
    units: list[_Unit] = []
    marks: list[tuple[int, str]] = []

    def add(tokens: int, value: Any, block: Mapping[str, Any], where: str) -> None:
        if block.get("cache_control") is not None:
            marks.append((len(units), _cache_ttl(block["cache_control"], where)))
        units.append((tokens, value))

    for i, tool in enumerate(tools):
        bare = _strip(tool)
        add(count_chat_prompt((), [bare]) - REPLY_PRIMING, ("tool", bare), tool, f"tools[{i}]")
    if isinstance(system, str):
        units.append((count_tokens(system), ("system", system)))
    elif system:
        for i, block in enumerate(system):
            if isinstance(block, Mapping):
                add(_block_tokens(block), ("system", _strip(block)), block, f"system[{i}]")
    for m, (role, content) in enumerate(messages):
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for j, block in enumerate(blocks):
            if not isinstance(block, Mapping):
                continue
            framing = MESSAGE_OVERHEAD + count_tokens(role) if j == 0 else 0
            add(framing + _block_tokens(block), (role, j, _strip(block)), block,
                f"messages[{m}].content[{j}]")
    return units, marks


def anthropic_prefix(units: Sequence[_Unit], marks: Sequence[tuple[int, str]],
                     top_level: Any, prompt_tokens: int, salt: str) -> PrefixKey | None:
    """Anthropic's explicit caching: written at breakpoints, read at block boundaries within
    ``ANTHROPIC_LOOKBACK`` blocks before one. None when nothing is marked."""
    marks = list(marks)
    if top_level is not None:
        ttl = _cache_ttl(top_level, "body")
        if units:
            marks.append((len(units) - 1, ttl))
    if len(marks) > ANTHROPIC_MAX_BREAKPOINTS:
        raise bad_request(f"A maximum of {ANTHROPIC_MAX_BREAKPOINTS} blocks with cache_control "
                          f"may be provided. Found {len(marks)}.", param="cache_control")
    marks.sort()
    seen_short = False
    for _, ttl in marks:
        if ttl == "5m":
            seen_short = True
        elif seen_short:
            raise bad_request("A cache_control with ttl '1h' must not come after one with "
                              "ttl '5m' (tools, then system, then messages).",
                              param="cache_control")
    if not marks or not ANTHROPIC_MIN_TOKENS < prompt_tokens <= MAX_CACHEABLE_TOKENS:
        return None
    chain = _Chain(salt, units)
    written = {b: ANTHROPIC_TTL_S[ttl] for b, ttl in marks}
    readable = sorted({i for b in written for i in range(max(0, b - ANTHROPIC_LOOKBACK), b + 1)})
    points, hashes, writable, ttls = [], [], [], []
    last = 0
    for b in readable:
        p = chain.ends[b]
        if p <= last or p >= prompt_tokens:
            continue
        last = p
        points.append(p)
        hashes.append(_point(chain.chains[b], p))
        writable.append(b in written)
        ttls.append(written.get(b, ANTHROPIC_TTL_S["5m"]))
    if not points:
        return None
    return PrefixKey(tuple(points), tuple(hashes), tuple(writable), tuple(ttls),
                     min_tokens=ANTHROPIC_MIN_TOKENS, bill_writes=True)


def _marked(tools: Sequence[Mapping[str, Any]], system: Any,
            messages: Sequence[tuple[str, Any]]) -> bool:
    """Does any block carry ``cache_control``? (Most requests don't: skip the counting.)"""
    blocks: list[Any] = list(tools)
    if isinstance(system, list):
        blocks += system
    for _, content in messages:
        if isinstance(content, list):
            blocks += content
    return any(isinstance(b, Mapping) and b.get("cache_control") is not None for b in blocks)


def messages_prefix(req: Any, role: str, prompt_tokens: int) -> PrefixKey | None:
    """The ``PrefixKey`` of an Anthropic Messages request (the speed asked, its role, is part
    of it: switching speed misses the cache)."""
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    messages = [(m.role, m.content) for m in req.messages]
    top = getattr(req, "cache_control", None)
    if top is None and not _marked(tools, req.system, messages):
        return None
    units, marks = anthropic_blocks(tools, req.system, messages)
    salt = f"{req.model}|speed={role}"
    return anthropic_prefix(units, marks, top, prompt_tokens, salt)


def cache_writes(prefix: PrefixKey | None, stream: Any) -> tuple[int, int]:
    """Tokens an admitted request writes to its replica's cache (billed when its key says so),
    and how many of them are long-lived; ``stream`` is the engine's ``TokenStream``."""
    if prefix is None or stream.replica.scheduler.cache is None:
        return 0, 0
    return prefix.writes(stream.seq.cache_hit, stream.seq.prompt_tokens)


def cache_write_premium(input_price: float, written: int, written_long: int) -> float:
    """USD on top of the input price for tokens written to the cache (per MTok prices)."""
    short = written - written_long
    return (short * (CACHE_WRITE_FACTOR - 1) + written_long * (CACHE_WRITE_LONG_FACTOR - 1)) \
        * input_price / 1e6
