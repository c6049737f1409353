"""Legacy Completions request body (``POST /v1/completions``), validated by pydantic at the edge.

The fields load tools send: ``vllm bench serve`` posts ``model``, ``prompt``, ``max_tokens``,
``stream: true``, ``stream_options.include_usage``, ``logprobs: null``,
``repetition_penalty`` (a vLLM extension, ignored) and, for fixed-length runs, ``ignore_eos``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, field_validator

from fastmode.gateway.protocols.base import Lenient
from fastmode.gateway.protocols.openai_chat.schema import ServiceTier, StreamOptions

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionsRequest(Lenient):
    model: str
    prompt: Prompt
    max_tokens: StrictInt | None = Field(16, ge=1)  # OpenAI's default for this endpoint
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    echo: StrictBool = False
    stop: str | list[str] | None = None
    seed: StrictInt | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    n: StrictInt | None = Field(None, ge=1, le=128)
    best_of: StrictInt | None = Field(None, ge=1, le=20)
    logprobs: StrictInt | None = Field(None, ge=0, le=5)
    suffix: str | None = None
    user: str | None = None
    service_tier: ServiceTier | None = None
    ignore_eos: StrictBool = False  # vLLM's extension: exactly max_tokens (benchmarks)
    prompt_cache_key: str | None = Field(None, max_length=1024)
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    kv_transfer_params: dict[str, Any] | None = None  # vLLM's P/D exchange (an engine's)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v
