"""OpenAI's legacy Completions (``POST /v1/completions``) as a protocol plug-in.

Still the default endpoint of ``vllm bench serve`` and of other load tools. One prompt per
request: a string, a list holding one string, or token ids (a list of integers, or a list
holding one such list; the mock has no vocabulary, so token ids count as prompt tokens and the
model sees no text). ``echo`` puts the prompt text before the reply; ``ignore_eos`` makes the
reply exactly ``max_tokens`` long. Prompt caching follows OpenAI's automatic rule at token
level: the prompt's 128-token chunks from 1,024 tokens on (``gateway.values.caching``).
"""

from __future__ import annotations

from fastmode.backends.mockmodel import GenerationRequest
from fastmode.backends.tokenizer import count_tokens
from fastmode.gateway.errors import bad_request
from fastmode.gateway.protocols.base import Protocol, RequestContext
from fastmode.gateway.protocols.openai_completions.encoder import (
    CompletionsEncoder,
    completion_usage,
)
from fastmode.gateway.protocols.openai_completions.schema import CompletionsRequest
from fastmode.gateway.values.caching import text_prefix
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.request import TurnRequest

__all__ = ["CompletionsEncoder", "CompletionsProtocol", "CompletionsRequest", "completion_usage"]


def _prompt(req: CompletionsRequest) -> str | list[int]:
    """The one prompt of the request, as text or token ids; a 400 for anything else."""
    p = req.prompt
    if isinstance(p, list) and p and isinstance(p[0], (str, list)):
        if len(p) != 1:
            raise bad_request(
                f"prompt: fastmode serves one prompt per request; got {len(p)}. Send them as "
                "separate requests.", param="prompt", code="invalid_value")
        p = p[0]
    if not p:
        raise bad_request("prompt: must not be empty.", param="prompt", code="invalid_value")
    if isinstance(p, str):
        return p
    ids = [t for t in p if isinstance(t, int)]
    if len(ids) != len(p) or min(ids) < 0:
        raise bad_request("prompt: token ids must be non-negative integers.", param="prompt",
                          code="invalid_value")
    return ids


class CompletionsProtocol(Protocol):
    name = "completions"
    schema = CompletionsRequest

    def translate(self, req: CompletionsRequest, ctx: RequestContext) -> TurnRequest:
        for field, value in (("n", req.n), ("best_of", req.best_of)):
            if value is not None and value > 1:
                raise bad_request(f"{field}: only 1 is supported by fastmode.", param=field,
                                  code="invalid_value")
        if req.logprobs:
            raise bad_request("logprobs are not supported by fastmode.", param="logprobs",
                              code="invalid_value")
        if req.suffix:
            raise bad_request("suffix (insertion) is not supported by fastmode.",
                              param="suffix", code="invalid_value")
        if req.stream_options is not None and not req.stream:
            raise bad_request(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options")
        prompt = _prompt(req)
        if isinstance(prompt, list) and req.echo:
            raise bad_request("echo: token-id prompts cannot be echoed (fastmode has no "
                              "vocabulary); send the prompt as text.", param="echo",
                              code="invalid_value")
        text = prompt if isinstance(prompt, str) else ""
        tokens = count_tokens(text) if isinstance(prompt, str) else len(prompt)
        messages = [{"role": "user", "content": text}]
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        gen = GenerationRequest(
            messages=messages,
            stop=stop,
            seed=req.seed,
            temperature=1.0 if req.temperature is None else req.temperature,
            tool_choice="none",
            ignore_eos=req.ignore_eos,
        )
        return TurnRequest(
            model=req.model,
            role=self.vocabulary.role_of(req.service_tier, ctx.fast_path),
            generation=gen,
            prompt_tokens=max(1, tokens),
            max_tokens=req.max_tokens,
            stream=req.stream,
            authorization=ctx.headers.get("authorization"),
            messages=messages,
            own_count=True,
            prefix=text_prefix(prompt, tokens, req.model, req.prompt_cache_key,
                               req.prompt_cache_retention),
            raw_prompt=prompt,
            kv_transfer=req.kv_transfer_params,
            dp_rank=ctx.headers.get("x-data-parallel-rank"),
        )

    def encoder(self, job: Job, req: CompletionsRequest, turn: TurnRequest) -> CompletionsEncoder:
        include = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        echo = req.prompt if req.echo and isinstance(req.prompt, str) else None
        if req.echo and isinstance(req.prompt, list):
            echo = str(req.prompt[0])
        return CompletionsEncoder(job, include, echo)
