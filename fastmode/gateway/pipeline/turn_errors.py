"""What a turn ends a stream with on its own account (its own failure, a reader too far behind:
``gateway.edge.watchdog`` uses it too, a ``malformed`` fault's body), and a non-streamed turn's
wait for its tokens."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastmode.gateway.errors import APIError
from fastmode.gateway.values.job import Job

# the event type a `malformed` fault breaks, per protocol (the SDKs parse these)
MALFORMED_EVENT = {"responses": "response.output_text.delta", "messages": "content_block_delta"}
MALFORMED_BODY = b'{"fastmode_fault": "malformed", "delta": "\\u12'




def internal_error(exc: BaseException) -> APIError:
    return APIError(500, f"Internal error: {type(exc).__name__}", code="internal_error")


def lagging(lag: float, bound: float) -> APIError:
    return APIError(408, f"The client read the stream {lag:.1f} s behind the model, more than "
                    f"the {bound:g} s the server keeps; the stream was cut.",
                    code="stream_reader_too_slow", type="timeout_error")


async def drain(job: Job, disconnected: Callable[[], Awaitable[None]]) -> bool:
    """Drain the job's tokens; False if ``disconnected`` returned first (job cancelled)."""
    async def tokens() -> None:
        async for _ in job.tokens():
            pass

    drain_task = asyncio.ensure_future(tokens())
    watch = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({drain_task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not drain_task.done():
            drain_task.cancel()
            job.cancel()
    return drain_task in done and not drain_task.cancelled()
