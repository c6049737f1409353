"""One journal entry: what a test's request was and what it got, as plain values."""

from __future__ import annotations

from typing import Any

import orjson


def _plain(value: Any) -> Any:
    """A request's messages as JSON values (they may hold pydantic models or tuples)."""
    return orjson.loads(orjson.dumps(value, default=_default))


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    if hasattr(value, "__dict__"):
        return vars(value)
    return str(value)


def entry(job: Any, request: Any, scripted: bool, at: float) -> dict[str, Any]:
    gen, r = job.gen, request.generation
    calls = [{"id": c.id, "name": c.name, "arguments": orjson.loads(c.arguments)
              if c.arguments.strip().startswith("{") else c.arguments}
             for c in getattr(gen, "tool_calls", ())]
    return {
        "id": job.id,
        "at": at,  # Unix time admitted (the order of a journal gathered from workers)
        "protocol": job.protocol,
        "transport": job.transport,
        "model": job.model,
        "role": job.role.name,
        "tier": job.tier.name,
        "messages": _plain(list(r.messages)),
        "tools": [t.name for t in r.tools],
        "reply": {"text": gen.text, "tool_calls": calls,
                  "finish_reason": gen.finish_reason},
        "usage": {"prompt_tokens": job.prompt_tokens, "cached_tokens": job.cached_tokens,
                  "output_tokens": job.billed_output if job.settled else gen.output_tokens},
        "cost_usd": job.cost_usd,
        "scripted": scripted,  # answered by one of the test's replies
        "fault": job.fault,
        "settled": job.settled,
        "ended": job.ended,
    }
