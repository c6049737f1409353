"""The one tokenizer used everywhere: prompt counting, output pacing, usage and billing.

Why not a real BPE vocabulary? The gateway is a simulator: it needs token counts that are
*plausible* (within ~10-20% of what cl100k/o200k-style tokenizers report on English and code),
*identical* wherever they are computed (prompt accounting, streaming, usage, rate limits), and
*cheap*, with no downloads or vocabulary files. A single compiled regular expression gives all
three.

How text is split (``tokenize``), left to right, first matching rule wins:

1. an optional leading space plus a run of letters, at most 6 letters per token (a longer word
   continues as further tokens without the space: ``" tokenizer"`` -> ``" tokeni"``, ``"zer"``);
2. an optional leading space plus a run of digits, at most 3 digits per token;
3. one punctuation or symbol character (``_`` included), with an optional leading space;
4. a run of whitespace, newlines included, as one token; when the run ends in a space that is
   followed by a non-space, that last space is left to start the next token (as in GPT
   tokenizers, so ``"a  b"`` is ``"a"``, ``" "``, ``" b"``).

Every character matches one of the rules, so ``"".join(tokenize(t)) == t`` for every string, and
a prefix of the tokens re-tokenizes to the same tokens (cutting output at a token boundary is
stable). On English prose this gives about 4-4.5 characters and 1.2-1.3 tokens per word; code
comes out denser (more punctuation), as with real tokenizers.

How a chat prompt is counted (``count_chat_prompt``), after the OpenAI cookbook recipe:

* 3 tokens of framing per message, plus the tokens of its ``role``, its text content, its
  ``name`` and ``tool_call_id``, and for each of its ``tool_calls`` the function name and the
  arguments text;
* content may be a string, ``None`` or a list of parts: text parts (``text``, ``input_text``,
  ``output_text``) count their text, image parts what their provider bills for them (OpenAI's
  512 px tiles, Anthropic's pixels / 750: ``backends.images``), Anthropic-style ``tool_use`` /
  ``tool_result`` blocks count their name, input JSON and content;
* 3 tokens priming the assistant's reply;
* each tool definition counts the tokens of its JSON text (sorted keys, compact separators).

Long texts (over ``CHUNK_CHARS``) are counted a chunk of ``CHUNK_TOKENS`` tokens at a time: one
regular-expression call holds the GIL for as long as it runs (a 15.6 MB prompt of ``"."`` is
15.6 M matches, ~4 s), so a request counted in a worker thread would still freeze the event
loop if it were one call. Chunks give the loop the GIL back every few milliseconds, and give the
count a place to stop: inside ``prompt_budget(limit)`` (the gateway sets the largest context
window it serves) counting raises ``PromptTooLong`` as soon as a prompt is known to be longer
than ``limit``, so a prompt far over any window costs what ``limit`` tokens cost, not its size.
Chunking never changes a count: the pattern has no look-behind and no anchors, so the scan of
the rest after N matches is the scan of the whole from there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from fastmode.backends.canonical_json import canonical_text
from fastmode.backends.images import part_tokens
from fastmode.backends.memo import Memo

__all__ = [
    "MESSAGE_OVERHEAD",
    "REPLY_PRIMING",
    "PromptTooLong",
    "count_chat_prompt",
    "count_tokens",
    "prompt_budget",
    "tokenize",
]

MESSAGE_OVERHEAD = 3  # framing tokens per chat message (<|start|>role ... <|end|>)
REPLY_PRIMING = 3  # tokens that open the assistant's reply

_TOKEN_RE = re.compile(
    r" ?[^\W\d_]{1,6}"  # letters, capped so long words cost several tokens
    r"| ?\d{1,3}"  # digits in groups of three
    r"| ?(?:[^\w\s]|_)"  # one punctuation / symbol character
    r"|\s+(?= \S)"  # whitespace, leaving the last space to the next word
    r"|\s+"  # any other whitespace run
)

CHUNK_CHARS = 65536  # texts longer than this are counted in chunks...
CHUNK_TOKENS = 32768  # ...of this many tokens (~8 ms of matching at worst, one "." a token)

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image", "image_file"})


class PromptTooLong(Exception):
    """Counting stopped: the prompt has more than ``limit`` tokens (``counted`` so far)."""

    def __init__(self, counted: int, limit: int) -> None:
        super().__init__(f"more than {limit} tokens (counting stopped at {counted})")
        self.counted = counted
        self.limit = limit


_BUDGET: ContextVar[int | None] = ContextVar("fastmode_prompt_budget", default=None)
_SCOPE: ContextVar[str | None] = ContextVar("fastmode_count_scope", default=None)

# Long texts' counts, remembered per caller (``prompt_budget(limit, scope)``, ``backends.memo``).
# Counting is one scan of the pattern over each text, ~70 us a kilobyte on a 2-core VM (a 60 KB
# Codex CLI request, counted for its total and again per cache unit: ~8 ms of CPU); a count
# looked up costs the text's hash, ~1 us a kilobyte.
MEMO_MIN_CHARS = 512  # shorter texts are counted again (a scan costs about what a lookup does)
MEMO_MAX_CHARS = 16 << 20  # the texts kept for it, in all (~16 MB); least recently used go first
_COUNTS: Memo[int] = Memo(MEMO_MAX_CHARS)


class prompt_budget:  # noqa: N801 (used as a function: ``with prompt_budget(n):``)
    """Prompt counts inside this block raise ``PromptTooLong`` past ``limit`` tokens; with a
    ``scope`` (the caller's key), counts of long texts are remembered for that scope. A class,
    not ``contextlib.contextmanager``: it wraps every request's translation, and a generator
    context manager costs ~1 us more per use."""

    __slots__ = ("limit", "scope", "_token", "_scoped")

    def __init__(self, limit: int, scope: str | None = None) -> None:
        self.limit = limit
        self.scope = scope

    def __enter__(self) -> None:
        self._token = _BUDGET.set(self.limit)
        self._scoped = _SCOPE.set(self.scope)

    def __exit__(self, *exc: object) -> None:
        _SCOPE.reset(self._scoped)
        _BUDGET.reset(self._token)


def _over(total: int) -> None:
    limit = _BUDGET.get()
    if limit is not None and total > limit:
        raise PromptTooLong(total, limit)


def tokenize(text: str) -> list[str]:
    """Split ``text`` into token strings; joining them gives ``text`` back exactly."""
    if len(text) <= CHUNK_CHARS:
        return _TOKEN_RE.findall(text)
    out: list[str] = []
    while text:  # each chunk ends where a scan of the whole would have ended a token
        rest, _ = _TOKEN_RE.subn("", text, count=CHUNK_TOKENS)
        out += _TOKEN_RE.findall(text, 0, len(text) - len(rest))
        text = rest
    return out


def count_tokens(text: str) -> int:
    """Number of tokens in ``text``, without building the token list (remembered for a long
    text inside ``prompt_budget(limit, scope)``).

    ``subn`` with an empty replacement counts the matches inside the regex engine; since every
    character belongs to some token, the (empty) result string costs nothing to build. With a
    ``count`` it stops after that many matches, and what it returns is the text not yet
    matched: the next chunk.
    """
    if len(text) < MEMO_MIN_CHARS:
        return _TOKEN_RE.subn("", text)[1] if text else 0
    scope = _SCOPE.get()
    if scope is None:
        return _scan(text)
    n = _COUNTS.get(scope, text)
    if n is None:
        n = _scan(text)  # (a text past the budget raises here: never remembered)
        _COUNTS.put(scope, text, n)
    else:
        _over(n)
    return n


def _scan(text: str) -> int:
    if len(text) <= CHUNK_CHARS:
        return _TOKEN_RE.subn("", text)[1]
    total = 0
    while text:
        text, n = _TOKEN_RE.subn("", text, count=CHUNK_TOKENS)
        total += n
        _over(total)
    return total


def count_chat_prompt(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
) -> int:
    """Prompt tokens of a chat request: messages with their framing, reply priming, tools.
    Inside ``prompt_budget``, stops with ``PromptTooLong`` once the total is past it."""
    total = REPLY_PRIMING
    for message in messages:
        total += _count_message(message)
        _over(total)
    for tool in tools or ():
        total += count_tokens(_compact_json(tool))
        _over(total)
    return total


def _count_message(message: Mapping[str, Any]) -> int:
    """One message: framing + role + content + name/tool_call_id + tool calls."""
    total = MESSAGE_OVERHEAD + count_tokens(str(message.get("role") or ""))
    total += _count_content(message.get("content"))
    for key in ("name", "tool_call_id"):
        value = message.get(key)
        if value:
            total += count_tokens(str(value))
    for call in message.get("tool_calls") or ():
        total += _count_tool_call(call)
    return total


def _count_tool_call(call: Mapping[str, Any]) -> int:
    """A tool call as the model wrote it: the function's name and its arguments text (a
    custom tool's call: its name and its input text)."""
    # chat shape {"function": {...}} or {"custom": {...}}, or flat
    function = call.get("function") or call.get("custom") or call
    name = str(function.get("name") or "")
    arguments = function.get("arguments", function.get("input"))
    if not isinstance(arguments, str):
        arguments = "" if arguments is None else _compact_json(arguments)
    return count_tokens(name) + count_tokens(arguments)


def _count_content(content: Any) -> int:
    """Message content: a string, nothing, or a list of typed parts."""
    if content is None:
        return 0
    if isinstance(content, str):
        return count_tokens(content)
    if isinstance(content, Mapping):
        return _count_part(content)
    if isinstance(content, Iterable):
        return sum(_count_part(part) for part in content)
    return count_tokens(str(content))


def _count_part(part: Any) -> int:
    """One content part; unknown part types count whatever text they carry."""
    if isinstance(part, str):
        return count_tokens(part)
    if not isinstance(part, Mapping):
        return 0
    kind = part.get("type")
    if not isinstance(kind, str):  # e.g. a list: unhashable (the gateway refuses it first)
        kind = None
    if kind in _IMAGE_PART_TYPES:
        return part_tokens(part)
    if kind in _TEXT_PART_TYPES or isinstance(part.get("text"), str):
        return count_tokens(str(part.get("text") or ""))
    if kind == "refusal":
        return count_tokens(str(part.get("refusal") or ""))
    total = 0
    if kind == "tool_use":  # Anthropic: the model's call, input is a JSON object
        total += count_tokens(str(part.get("name") or ""))
        total += count_tokens(_compact_json(part.get("input") or {}))
    if "content" in part:  # Anthropic tool_result: nested string or parts
        total += _count_content(part.get("content"))
    return total


def _compact_json(value: Any) -> str:
    """Canonical JSON text, so the same definition always costs the same tokens."""
    return canonical_text(value)
