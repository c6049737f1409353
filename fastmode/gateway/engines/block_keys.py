"""A request's prefix key in vLLM's blocks, for a deployment whose cache holds them (an engine).

The prompt becomes token ids as ``/tokenize`` gives them (``backends.token_ids``): a plain
prompt (Completions) as sent, text or ids; any other protocol's conversation rendered as a chat
(its normalised messages and tools). The ids are fitted to the tokens the request is billed for,
then hashed in blocks (``backends.block_hash``), so the blocks a replica stores, its hit rate,
the TTFT a hit saves and the KV events a router reads all come from one structure.
"""

from __future__ import annotations

from fastmode.backends.block_hash import BlockHasher
from fastmode.backends.prefix_cache import PrefixKey
from fastmode.backends.token_ids import Vocabulary, fit, tool_dict
from fastmode.gateway.values.request import TurnRequest


def prompt_ids(vocab: Vocabulary, request: TurnRequest) -> list[int]:
    raw = request.raw_prompt
    if isinstance(raw, list):
        ids = [int(t) for t in raw]
    elif isinstance(raw, str):
        ids = vocab.encode(raw)
    else:
        tools = [tool_dict(t.name, t.description, t.parameters)
                 for t in request.generation.tools]
        ids = vocab.chat_ids(request.messages or request.generation.messages, tools)
    return fit(ids, request.prompt_tokens, request.model.encode())


def block_prefix(vocab: Vocabulary, request: TurnRequest, hasher: BlockHasher,
                 adapter: str | None = None, lora_id: int | None = None) -> PrefixKey | None:
    """``adapter``: the LoRA adapter the request runs on, hashed into every block as vLLM's
    extra key (``(name,)``), so an adapter's blocks are its own; ``lora_id``, its int id,
    is what the KV events' ``BlockStored`` report them under (vLLM's ``lora_id``)."""
    return hasher.key(prompt_ids(vocab, request), (adapter,) if adapter is not None else None,
                      lora_id)
