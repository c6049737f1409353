"""Token ids for the one tokenizer (``backends.tokenizer``): what ``/tokenize`` answers and what
the prefix cache hashes in blocks, as a vLLM engine hashes its prompt's token ids.

The tokenizer splits text into token *strings* and has no vocabulary file. An id is a hash of
the string (blake2b, 32 bits, above the ``RESERVED`` special ids), so every process maps the
same text to the same ids (routers that hash prompts themselves agree with every engine) and
ids fit the ``uint32`` that KV-event consumers decode them as (llm-d's ``TokenIds []uint32``).
The map is not invertible by itself: ``Vocabulary`` remembers the strings it gave ids to, so
``/detokenize`` answers ids this process produced and refuses others, as vLLM refuses ids
outside its vocabulary.

A chat prompt becomes ids the way a chat template renders it (``chat_ids``): tool definitions
first (their canonical JSON, the count ``count_chat_prompt`` gives them), then each message as
``<|start|>`` role ``<|sep|>`` text ``<|end|>`` (the 3 framing tokens the count has), and the 3
tokens that prime the reply. Parts of a message with no text of their own (an image, a tool
call's framing) count tokens without text: they become ids derived from the part's content, so
two prompts share ids exactly where they share content. ``fit`` pads or cuts a rendering to the
prompt's counted length, so a replica's blocks always cover the tokens it was billed for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from hashlib import blake2b
from typing import Any

from fastmode.backends.tokenizer import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    count_chat_prompt,
    count_tokens,
    tokenize,
)

RESERVED = 256  # ids below this are special tokens
START, SEP, END, ASSISTANT = 1, 2, 3, 4  # <|start|>, <|sep|>, <|end|>, the reply's role
SPECIAL = {START: "<|start|>", SEP: "<|sep|>", END: "<|end|>", ASSISTANT: "assistant"}
_SPAN = (1 << 32) - RESERVED
VOCAB_MEMORY = 1 << 20  # token strings a Vocabulary remembers (~200 MB at most)


def token_id(token: str) -> int:
    """The id of one token string: the same in every process."""
    h = int.from_bytes(blake2b(token.encode("utf-8", "surrogatepass"), digest_size=4).digest(),
                       "little")
    return RESERVED + h % _SPAN


def _filler(seed: bytes, n: int) -> list[int]:
    """``n`` ids standing for content without text (an image, a call's framing)."""
    out: list[int] = []
    i = 0
    while len(out) < n:
        d = blake2b(seed + i.to_bytes(4, "little"), digest_size=64).digest()
        out += [RESERVED + int.from_bytes(d[j:j + 4], "little") % _SPAN
                for j in range(0, 64, 4)]
        i += 1
    return out[:n]


def _seed(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return blake2b(text.encode(), digest_size=16).digest()


class Vocabulary:
    """Encodes text to ids and decodes the ids it handed out (see the module docstring)."""

    def __init__(self, memory: int = VOCAB_MEMORY) -> None:
        self._strings: dict[int, str] = {}  # id -> the first token string given it
        self._ids: dict[str, int] = {}  # token string -> id, for the ones seen (fast path)
        self._memory = memory

    def encode(self, text: str) -> list[int]:
        known = self._ids.get
        new = self._new
        return [known(t) or new(t) for t in tokenize(text)]  # (ids are never 0)

    def _new(self, token: str) -> int:
        i = token_id(token)
        if len(self._ids) < self._memory:
            self._ids[token] = i
            self._strings.setdefault(i, token)
        return i

    def pieces(self, ids: Iterable[int]) -> list[str | None]:
        """The string of each id (None: an id this vocabulary never produced)."""
        strings = self._strings
        return [SPECIAL.get(i) if i < RESERVED else strings.get(i) for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; ``KeyError`` names the first id it does not know."""
        out = self.pieces(ids)
        for i, s in zip(ids, out, strict=True):
            if s is None:
                raise KeyError(i)
        return "".join(s for s in out if s is not None)

    # -- chat prompts -----------------------------------------------------------------------

    def message_ids(self, message: Mapping[str, Any]) -> list[int]:
        """One message as a chat template renders it: exactly the tokens the count gives it."""
        role = self.encode(str(message.get("role") or ""))
        content = message.get("content")
        if isinstance(content, str) and message.keys() <= {"role", "content"}:
            # plain text: its ids are its count (no second scan of a long text)
            return [START, *role, SEP, *self.encode(content), END]
        n = count_chat_prompt([message]) - REPLY_PRIMING
        body = [START, *role, SEP]
        texts: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, Iterable) and not isinstance(content, Mapping):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
        for key in ("name", "tool_call_id"):
            if message.get(key):
                texts.append(str(message[key]))
        for text in texts:
            body += self.encode(text)
        rest = n - len(body) - 1
        if rest > 0:  # parts without text: ids from their content
            body += _filler(_seed(message), rest)
        return [*body[:n - 1], END] if n > 0 else []

    def tool_ids(self, tool: Mapping[str, Any]) -> list[int]:
        text = json.dumps(tool, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          default=str)
        return self.encode(text)

    def chat_ids(self, messages: Sequence[Mapping[str, Any]],
                 tools: Sequence[Mapping[str, Any]] = (), generation_prompt: bool = True
                 ) -> list[int]:
        """A chat prompt's ids: tools, messages, then the reply's priming."""
        ids: list[int] = []
        for tool in tools:
            ids += self.tool_ids(tool)
        for m in messages:
            ids += self.message_ids(m)
        if generation_prompt:
            ids += [START, ASSISTANT, SEP][:REPLY_PRIMING]
        return ids


def fit(ids: list[int], n: int, salt: bytes = b"") -> list[int]:
    """``ids`` cut or padded (with ids derived from them) to exactly ``n``."""
    if len(ids) >= n:
        return ids[:n]
    return ids + _filler(blake2b(salt + bytes(str(len(ids)), "ascii"), digest_size=16).digest(),
                         n - len(ids))


def tool_dict(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool definition in the one shape ids are rendered from (whatever the wire shape)."""
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": dict(parameters)}}


__all__ = ["ASSISTANT", "END", "MESSAGE_OVERHEAD", "RESERVED", "SEP", "START", "Vocabulary",
           "count_tokens", "fit", "token_id", "tool_dict"]
