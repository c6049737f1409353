"""The one internal request that every protocol translates its wire request into.

Chat Completions, the Responses API (over SSE and over the websocket) and Anthropic Messages
differ in field names and shapes, not in what the gateway must know to serve a turn: this
dataclass is that knowledge, named. Admission, streaming and settlement read only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastmode.backends.mockmodel import GenerationRequest
from fastmode.backends.prefix_cache import PrefixKey


@dataclass
class TurnRequest:
    model: str
    # the role asked for (``gateway.values.roles``): standard, fast, flex, ... from the protocol's
    # vocabulary (service_tier, speed, the /fast/v1 path); never a tier's name
    role: str
    generation: GenerationRequest  # what the mock model reads (messages, tools, seed, ...)
    prompt_tokens: int
    max_tokens: int | None  # the request's cap; None: the server default within the window
    stream: bool
    authorization: str | None = None  # "Bearer KEY" (Anthropic's x-api-key is mapped to it)
    cached_tokens: int = 0  # prefix already in the KV cache (a continued response)
    # the conversation as chat messages, for protocols that store it to continue later
    messages: list[dict[str, Any]] = field(default_factory=list)
    # the request field that asked for reasoning, named by a 400 on a model that does not reason
    reasoning_param: str = "reasoning_effort"
    prefix: PrefixKey | None = None  # where the prompt may be cut and cached (gateway.caching)
    # False: a warm-up (Responses ``generate: false``): the prompt is prefilled, and so its
    # prefix cached, but no reply is written (no output, no reasoning; input billed only)
    generate: bool = True
    # ``prompt_tokens`` is the count of what the client sent in a form a remote tier never sees
    # (a Completions prompt, a Messages request: sent upstream as Chat, whose count differs):
    # kept through a remote tier instead of the upstream's count, so a count is the same on
    # every path
    own_count: bool = False
    # a plain prompt (legacy Completions: text or token ids), hashed in blocks as it is sent
    raw_prompt: str | list[int] | None = None
    # vLLM's ``kv_transfer_params`` (P/D across engines: gateway.engines.kv_transfer)
    kv_transfer: dict[str, Any] | None = None
    # vLLM's X-data-parallel-rank header, as sent (gateway.engines.data_parallel)
    dp_rank: str | None = None
