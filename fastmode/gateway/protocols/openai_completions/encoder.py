"""Legacy Completions wire format: the ``text_completion`` body and its stream.

Streamed chunks have the body's shape (one choice with ``text``); the first one carries the
first token, so a benchmark client that times its first chunk (``vllm bench serve`` does)
measures the time to first token. The last token's chunk carries the finish reason (a reply
still arriving from a remote tier, whose last token is not known in advance, or an empty one:
a chunk of its own with empty text, as vLLM sends it); with
``stream_options.include_usage`` a chunk with ``choices: []`` and the usage follows, then
``data: [DONE]``. Chunks are a constant prefix, the token's text as a JSON string and a constant
suffix: nothing else is encoded per token.
"""

from __future__ import annotations

from typing import Any

import orjson

from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.base import Encoder
from fastmode.gateway.protocols.events import Frames
from fastmode.gateway.protocols.vocabulary import OPENAI_SERVICE_TIERS
from fastmode.gateway.values.job import Job

FINGERPRINT = "fp_fastmode"
DONE = b"[DONE]"


def completion_usage(job: Job) -> dict[str, Any]:
    out = job.gen.output_tokens
    return {
        "prompt_tokens": job.prompt_tokens,
        "completion_tokens": out,
        "total_tokens": job.prompt_tokens + out,
        "prompt_tokens_details": {"cached_tokens": job.cached_tokens},
        "cost_usd": job.usage_cost(),
    }


class CompletionsEncoder(Encoder):
    named_events = False

    def __init__(self, job: Job, include_usage: bool, echo: str | None) -> None:
        self.job = job
        self.include_usage = include_usage
        self.echo = echo  # the prompt text, sent before the reply when ``echo`` is set
        self.meta = {
            "id": job.id.replace("req-", "cmpl-"),
            "object": "text_completion",
            "created": job.created,
            "model": job.model,
            "system_fingerprint": FINGERPRINT,
        }
        head = orjson.dumps(self.meta)[:-1] + b',"choices":[{"index":0,"text":'
        self.prefix = head
        self.suffix = b',"logprobs":null,"finish_reason":null}]' + (
            b',"usage":null}' if include_usage else b"}")
        # the index of the token whose chunk carries the reason: the last one of a whole reply;
        # none of a live one (a remote tier's: its last token and its reason are not known
        # while it arrives), whose reason gets a chunk of its own at the close
        live = bool(getattr(job.gen, "live", False))
        self.finish = -1 if live else len(job.gen.pieces) - 1
        self.finish_sent = False

    def _text(self, i: int) -> str:
        text = self.job.gen.pieces[i].text
        if i == 0 and self.echo:
            return self.echo + text
        return text

    def _chunk(self, i: int) -> bytes:
        if i == self.finish:
            self.finish_sent = True
            return self._finish_chunk(self._text(i))
        return self.prefix + orjson.dumps(self._text(i)) + self.suffix

    def _finish_chunk(self, text: str) -> bytes:
        choice = {"index": 0, "text": text, "logprobs": None,
                  "finish_reason": self.job.gen.finish_reason}
        extra = {"usage": None} if self.include_usage else {}
        return orjson.dumps({**self.meta, "choices": [choice], **extra})

    def tokens(self, start: int, count: int) -> Frames:
        end = min(start + count, len(self.job.gen.pieces))
        return [("", self._chunk(i)) for i in range(start, end)]

    def sse_tokens(self, start: int, count: int) -> bytes:
        end = min(start + count, len(self.job.gen.pieces))
        return b"".join(b"data: " + self._chunk(i) + b"\n\n" for i in range(start, end))

    def closing(self) -> Frames:
        out: Frames = [] if self.finish_sent else [("", self._finish_chunk(""))]
        if self.include_usage:
            usage = {**self.meta, "choices": [], "usage": completion_usage(self.job),
                     "time_info": self.job.time_info()}
            out.append(("", orjson.dumps(usage)))
        out.append(("", DONE))
        return out

    def body(self) -> dict[str, Any]:
        job = self.job
        text = job.gen.text
        if self.echo:
            text = self.echo + text
        return {
            **self.meta,
            "service_tier": OPENAI_SERVICE_TIERS.label(job.role),
            "choices": [{"index": 0, "text": text, "logprobs": None,
                         "finish_reason": job.gen.finish_reason}],
            "usage": completion_usage(job),
            "time_info": job.time_info(),
            **({"kv_transfer_params": job.kv_transfer_params} if job.kv_transfer_asked else {}),
        }

    def failed(self, error: APIError) -> Frames:
        """OpenAI's in-stream error: ``data: {"error": {...}}``."""
        return [("", orjson.dumps(error.body()))]
