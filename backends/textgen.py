"""What the mock model says: text replies, tool calls, scripted answers and botched calls.

Everything here is a pure function of the request: no clock, no I/O. The serving simulation
decides *when* each token is emitted; this module decides *what* the tokens are, so that clients
see plausible, varied output whose token counts agree with ``backends.tokenizer`` everywhere.

Determinism: the random stream is seeded from a BLAKE2 hash of the seed, the model, the
messages, the tools and the tool choice (never Python's salted ``hash()``). An unseeded request
with ``temperature > 0`` also mixes in fresh OS randomness, so repeated requests differ like a
sampled model's would; with a seed or ``temperature == 0`` the reply is fully reproducible.
``max_tokens``, ``stop`` and ``ignore_eos`` are deliberately left out of the hash: as with greedy
decoding on a real model, a capped reply is a prefix of the uncapped one.

Independent decisions (length, text, tool choice, arguments, botching) draw from separate
streams derived from the same hash, so changing one knob does not reshuffle the others.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.jsonschema_gen import generate_value, validate_arguments
from backends.tokenizer import count_tokens, tokenize

__all__ = [
    "DEFAULT_QUALITY",
    "BOTCH_KINDS",
    "Generation",
    "GenerationRequest",
    "Piece",
    "QualityProfile",
    "ScriptRule",
    "ToolCall",
    "ToolSpec",
    "generate",
    "message_text",
    "validate_arguments",
]

BOTCH_KINDS = ("malformed_json", "unknown_tool", "missing_required", "invented_argument")

NATURAL_MEDIAN_TOKENS = 200  # median length of an unconstrained reply
NATURAL_SIGMA = 0.6  # lognormal spread: ~90% of replies between ~75 and ~540 tokens
NATURAL_MIN_TOKENS = 20
NATURAL_MAX_TOKENS = 1500


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; ``parameters`` is its JSON schema (an object schema)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, tool: Mapping[str, Any]) -> ToolSpec:
        """Accept the Chat (``{"type":"function","function":{...}}``), Responses (flat) and
        Anthropic (``input_schema``) shapes, so every front end can build the same spec."""
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        params = fn.get("parameters", fn.get("input_schema")) or {}
        return cls(str(fn.get("name", "")), str(fn.get("description") or ""), params)


@dataclass(frozen=True, slots=True)
class ScriptRule:
    """A scripted reply from the config, so users can drive their agents through known paths."""

    match: str  # Python regex searched in the last user message text
    reply: str | None = None  # fixed text reply, or
    tool_name: str | None = None  # a fixed tool call
    tool_arguments: Mapping[str, Any] | None = None


def _default_error_kinds() -> dict[str, float]:
    return dict.fromkeys(BOTCH_KINDS, 1.0)


@dataclass(frozen=True, slots=True)
class QualityProfile:
    """How reliable the simulated model is at tool calling (frontier: 0, a small distil: ~0.05)."""

    tool_error_rate: float = 0.0  # probability that a tool call is botched
    error_kinds: Mapping[str, float] = field(default_factory=_default_error_kinds)  # weights


DEFAULT_QUALITY = QualityProfile()


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """The parts of a chat request that shape the reply (wire format already normalised)."""

    messages: Sequence[Mapping[str, Any]]
    max_tokens: int | None = None  # cap on output tokens
    stop: Sequence[str] = ()
    seed: int | None = None
    temperature: float = 1.0
    tools: Sequence[ToolSpec] = ()
    tool_choice: str = "auto"  # "none" | "auto" | "required" | a tool name (forced)
    ignore_eos: bool = False  # produce exactly max_tokens tokens of text (benchmarks)
    model: str = ""


@dataclass(frozen=True, slots=True)
class Piece:
    """One output token: message content (tool == -1) or a fragment of tool call k's arguments."""

    text: str
    tool: int = -1


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call; ``arguments`` is the raw JSON text (malformed if botched that way)."""

    id: str
    name: str
    arguments: str
    botched: str | None = None  # which BOTCH_KINDS mistake was made, None if none


@dataclass(frozen=True, slots=True)
class Generation:
    """The whole reply, token by token; the server paces ``pieces`` out over time."""

    pieces: tuple[Piece, ...]
    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    stop_sequence: str | None = None  # the stop string that ended the text, if one did

    @property
    def output_tokens(self) -> int:
        return len(self.pieces)


# --------------------------------------------------------------------------- entry point


def generate(
    req: GenerationRequest,
    quality: QualityProfile = DEFAULT_QUALITY,
    scripts: Sequence[ScriptRule] = (),
) -> Generation:
    """The mock model's reply to ``req``: a scripted answer, a tool call, or free text."""
    streams = _Streams(_request_digest(req))
    last = req.messages[-1] if req.messages else None
    last_role = str(last.get("role", "")) if last is not None else ""
    user_text = message_text(last) if last_role == "user" else ""
    if last_role == "user":
        rule = _match_script(scripts, user_text)
        if rule is not None:
            return _scripted(rule, req, streams)
    if _wants_tool(req, last_role):
        return _tool_reply(req, quality, streams, user_text)
    opener = _tool_result_opener(req.messages) if last_role == "tool" else None
    return _text_reply(req, streams, opener)


def message_text(message: Mapping[str, Any] | None) -> str:
    """The plain text of a message: a string content, or its text parts joined by newlines."""
    if message is None:
        return ""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = [
        str(part.get("text") or "")
        for part in content
        if isinstance(part, Mapping) and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


# --------------------------------------------------------------------------- randomness


def _request_digest(req: GenerationRequest) -> bytes:
    """Stable hash of what determines the reply; fresh entropy only for unseeded sampling."""
    material = {
        "seed": req.seed,
        "model": req.model,
        "messages": list(req.messages),
        "tools": [[t.name, t.description, t.parameters] for t in req.tools],
        "tool_choice": req.tool_choice,
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str).encode()
    h = hashlib.blake2b(blob, digest_size=32)
    if req.seed is None and req.temperature > 0:
        h.update(os.urandom(16))
    return h.digest()


class _Streams:
    """Independent ``random.Random`` streams, one per decision, derived from one digest."""

    def __init__(self, digest: bytes) -> None:
        self.digest = digest

    def __call__(self, purpose: str) -> random.Random:
        return random.Random(self.digest + b"|" + purpose.encode())


# --------------------------------------------------------------------------- text replies


def _text_reply(req: GenerationRequest, streams: _Streams, opener: str | None) -> Generation:
    cap = req.max_tokens
    if req.ignore_eos and cap is not None:  # one token past the cap, so the cut says "length"
        text = _write_at_least(streams("text"), cap + 1, opener)
    else:
        natural = _natural_length(streams("length"))
        budget = natural if cap is None else min(natural, cap + 1)
        text = _write_at_least(streams("text"), budget, opener)
    return _finish_text(text, cap, req.stop)


def _natural_length(rng: random.Random) -> int:
    """How long the model 'wants' to talk: lognormal around the median, clipped."""
    n = round(rng.lognormvariate(math.log(NATURAL_MEDIAN_TOKENS), NATURAL_SIGMA))
    return max(NATURAL_MIN_TOKENS, min(NATURAL_MAX_TOKENS, n))


def _write_at_least(rng: random.Random, tokens: int, opener: str | None) -> str:
    """Whole chunks of prose until at least ``tokens`` tokens, ending at a chunk boundary.

    Chunk choice never depends on ``tokens``, so a shorter budget yields a prefix of a longer one.
    Chunks start with whitespace and end without it, so their token counts simply add up.
    """
    parts: list[str] = []
    total = 0
    for chunk in _Writer(rng, opener).chunks():
        if total >= tokens:
            break
        parts.append(chunk)
        total += count_tokens(chunk)
    return "".join(parts)


def _finish_text(text: str, cap: int | None, stop: Sequence[str]) -> Generation:
    """Apply the max_tokens cut, then stop sequences; pieces always match the final text."""
    tokens = tokenize(text)
    finish = "stop"
    if cap is not None and len(tokens) > cap:
        tokens = tokens[: max(cap, 0)]
        text = "".join(tokens)
        finish = "length"
    cut = _stop_index(text, stop)
    matched = None
    if cut is not None:
        matched = next(st for st in stop if st and text.startswith(st, cut))
        text = text[:cut]
        tokens = tokenize(text)
        finish = "stop"
    pieces = tuple(map(_text_piece, tokens))
    return Generation(pieces, text, (), finish, matched)


@functools.lru_cache(maxsize=1 << 16)
def _text_piece(token: str) -> Piece:
    """Pieces are immutable and the text bank's vocabulary is small: share them."""
    return Piece(token)


def _stop_index(text: str, stop: Sequence[str]) -> int | None:
    """Index of the earliest occurrence of any (non-empty) stop string, or None."""
    hits = [i for s in stop if s and (i := text.find(s)) >= 0]
    return min(hits) if hits else None


def _tool_result_opener(messages: Sequence[Mapping[str, Any]]) -> str:
    """First sentence after a tool result, naming the tool, so agent transcripts read well."""
    call_id = messages[-1].get("tool_call_id")
    name = next(
        (
            (call.get("function") or {}).get("name")
            for message in reversed(messages)
            for call in message.get("tool_calls") or ()
            if call.get("id") == call_id
        ),
        None,
    )
    if name:
        return f"Based on the result of {name}, here is what I found."
    return "Based on the tool output, here is what I found."


# --------------------------------------------------------------------------- the word bank

_SUBJECTS = (
    "the scheduler", "the gateway", "each worker", "the router", "the KV cache",
    "a decode step", "the prefill phase", "the tokenizer", "the load balancer", "the batch",
    "the runtime", "the event loop", "a replica", "the control plane", "the request queue",
    "the model server", "the draft model", "the speculative decoder", "the cache manager",
    "the rate limiter", "the admission controller", "the autoscaler", "the attention kernel",
    "the memory allocator", "the streaming layer", "the client library", "the retry policy",
    "the health check", "the profiler", "each shard", "the pipeline", "the compiler",
    "the benchmark harness", "the metrics exporter", "the config loader",
    "the connection pool", "the planner", "the fast tier", "the standard tier", "the proxy",
)  # fmt: skip
_VERBS = (
    "admit", "evict", "batch", "stream", "schedule", "retry", "buffer", "split", "merge",
    "route", "cache", "throttle", "prefetch", "flush", "serialize", "validate", "measure",
    "reuse", "preempt", "drain", "shard", "compress", "track", "replay", "pin", "release",
    "reserve", "forward", "rebalance", "coalesce", "sample", "verify", "restart", "log",
    "expose", "bound", "estimate", "amortize", "overlap", "reorder", "prioritize", "account for",
)  # fmt: skip
_OBJECTS = (
    "the request", "a new prefill", "the pending tokens", "the next chunk", "idle slots",
    "the prompt prefix", "stale entries", "the longest sequence", "each token",
    "the draft tokens", "the partial response", "the attention state", "the output stream",
    "the usage record", "the rate-limit window", "the cold replica", "the hot path",
    "the tail latency", "the first token", "the remaining budget", "the key-value blocks",
    "the tool call", "the JSON arguments", "the error rate", "queued work", "the socket",
    "the heartbeat", "the trace", "the checkpoint", "the shared prefix", "the weights",
    "the activations", "the batch size", "the step time", "the page table", "the retry budget",
)  # fmt: skip
_ADVERBIALS = (
    "at the next step", "once a slot is free", "under heavy load",
    "without blocking the event loop", "before the deadline", "in small chunks",
    "on every decode step", "when the queue is long", "after the prefill completes",
    "in the background", "as soon as possible", "for each tenant", "across all replicas",
    "within the token budget", "behind a feature flag", "on the fast tier",
    "at a fixed cadence", "when memory runs low", "per connection", "in the same step",
    "before it reaches the client", "only when asked", "with a short timeout",
    "in constant time", "during warm-up", "on a cache hit", "on a cache miss",
    "between two steps", "for long prompts", "at the end of the stream",
)  # fmt: skip
_OPENERS = (
    "In practice,", "However,", "As a result,", "For example,", "Meanwhile,", "In short,",
    "By default,", "Under the hood,", "In most deployments,", "To keep latency low,",
    "At high concurrency,", "Put simply,", "On the other hand,", "Because of this,",
    "In our tests,", "Even so,", "Crucially,", "In the common case,",
)  # fmt: skip
_REASONS = (
    "because memory bandwidth, not compute, bounds the decode phase",
    "so that no request waits behind a long prompt", "which keeps the accelerator busy",
    "since the prefix is already cached", "to avoid a thundering herd",
    "which roughly halves the time to first token", "so the client sees steady progress",
    "because each step reads every weight once", "which trades throughput for latency",
    "so that retries stay idempotent", "which is cheap compared with a full recompute",
    "because the queue would otherwise grow without bound",
)  # fmt: skip
_ADJECTIVES = (
    "fast", "slow", "stable", "predictable", "expensive", "cheap", "bounded", "noisy", "idle",
    "saturated", "warm", "cold", "stale", "small", "large", "busy", "lightly loaded",
)  # fmt: skip
_TOPICS = (
    "latency", "throughput", "batching", "scheduling", "streaming", "caching", "tokenization",
    "sampling", "backpressure", "quantization", "sharding", "prefill", "decoding", "fairness",
    "observability", "speculation", "admission control", "memory pressure", "tail latency",
)  # fmt: skip
_GREETINGS = (
    "Sure.", "Good question.", "Here is an overview.", "Short answer: it depends on the load.",
    "Let me walk through it.", "Here is how it works.",
)  # fmt: skip
_LIST_INTROS = (
    "Key points:", "The main steps are:", "In order:", "What to check:", "A quick summary:",
    "The moving parts:",
)  # fmt: skip
_FUNC_NAMES = ("handle", "admit_next", "step", "drain_queue", "stream_tokens", "plan_batch")
_VAR_NAMES = ("scheduler", "pool", "router", "engine", "queue", "cache")
_CODE_BLOCKS = (
    "```python\nasync def {fn}(request):\n    slot = await {var}.admit(request)\n"
    "    async for token in slot.stream():\n        yield token\n```",
    "```python\ndef {fn}(tokens: list[str], budget: int = {n}) -> list[str]:\n"
    "    # keep the newest tokens within the budget\n    return tokens[-budget:]\n```",
    '```json\n{{"model": "demo", "max_tokens": {n}, "stream": true, "seed": {m}}}\n```',
    "```bash\ncurl -s localhost:8000/v1/models | jq '.data[].id'\n```",
    "```python\nfor step in range({n}):\n    batch = {var}.next_batch(max_size={m})\n"
    "    if not batch:\n        break\n    {fn}(batch)\n```",
    "```yaml\n{var}:\n  max_batch: {m}\n  timeout_ms: {n}\n```",
)


def _third_person(verb: str) -> str:
    """'batch' -> 'batches', 'retry' -> 'retries', 'account for' -> 'accounts for'."""
    head, _, tail = verb.partition(" ")
    if head.endswith(("s", "sh", "ch", "x", "z")):
        head += "es"
    elif head.endswith("y") and head[-2:-1] not in "aeiou":
        head = head[:-1] + "ies"
    else:
        head += "s"
    return f"{head} {tail}" if tail else head


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


class _Writer:
    """Endless plausible prose about serving systems, as whitespace-led chunks.

    Output is paragraphs of templated sentences with the occasional list, heading or short code
    block, so streamed replies look like a model's and are not one word repeated.
    """

    def __init__(self, rng: random.Random, opener: str | None) -> None:
        self.rng = rng
        self.opener = opener

    def chunks(self) -> Iterator[str]:
        rng = self.rng
        first = self.opener or (rng.choice(_GREETINGS) if rng.random() < 0.4 else None)
        if first is not None:
            yield first
        sep = " " if first is not None else ""
        while True:
            roll = rng.random()
            if roll < 0.08:
                yield "\n\n" + self.code_block()
            elif roll < 0.18:
                yield from self.bullet_list()
            else:
                yield from self.paragraph(sep)
            sep = "\n\n"

    def paragraph(self, sep: str) -> Iterator[str]:
        if sep and self.rng.random() < 0.1:
            yield f"{sep}### {_cap(self.rng.choice(_TOPICS))}"
        for i in range(self.rng.randint(2, 5)):
            yield (sep if i == 0 else " ") + self.sentence()

    def bullet_list(self) -> Iterator[str]:
        rng = self.rng
        yield "\n\n" + rng.choice(_LIST_INTROS)
        numbered = rng.random() < 0.5
        for i in range(rng.randint(3, 5)):
            marker = f"{i + 1}." if numbered else "-"
            yield ("\n\n" if i == 0 else "\n") + f"{marker} {self.short_clause()}"

    def code_block(self) -> str:
        rng = self.rng
        template = rng.choice(_CODE_BLOCKS)
        return template.format(
            fn=rng.choice(_FUNC_NAMES),
            var=rng.choice(_VAR_NAMES),
            n=rng.choice((8, 16, 32, 64, 128, 256, 512, 1024)),
            m=rng.randint(2, 99),
        )

    def short_clause(self) -> str:
        c = self.rng.choice
        return f"{_cap(c(_SUBJECTS))} {_third_person(c(_VERBS))} {c(_OBJECTS)}."

    def sentence(self) -> str:
        """One sentence from a dozen templates; subjects are singular, so verbs agree."""
        rng, c = self.rng, self.rng.choice
        s, s2 = c(_SUBJECTS), c(_SUBJECTS)
        v, v2 = c(_VERBS), c(_VERBS)
        o, o2 = c(_OBJECTS), c(_OBJECTS)
        kind = rng.randrange(13)
        if kind == 0:
            return f"{c(_OPENERS)} {s} {_third_person(v)} {o} {c(_ADVERBIALS)}."
        if kind == 1:
            return f"{_cap(s)} {_third_person(v)} {o}, {c(_REASONS)}."
        if kind == 2:
            return f"When {s} is {c(_ADJECTIVES)}, {s2} {_third_person(v)} {o}."
        if kind == 3:
            return f"{_cap(c(_TOPICS))} matters here: {s} {_third_person(v)} {o} {c(_ADVERBIALS)}."
        if kind == 4:
            return f"Why does {s} {v} {o} {c(_ADVERBIALS)}? Mostly for {c(_TOPICS)}."
        if kind == 5:
            n, pct = rng.choice((45, 65, 170, 450, 1200, 1800)), rng.randint(20, 95)
            return f"{_cap(s)} {_third_person(v)} about {n} tokens per second ({pct}% of peak)."
        if kind == 6:
            n = rng.choice((4, 8, 16, 32, 64, 128))
            return (
                f"With a batch of {n}, {s} {_third_person(v)} {o}; "
                f"{s2} {_third_person(v2)} {o2} {c(_ADVERBIALS)}."
            )
        if kind == 7:
            return f"{_cap(s)} does not {v} {o} {c(_ADVERBIALS)}."
        if kind == 8:
            a, b = rng.sample(_ADJECTIVES, 2)
            t1, t2 = rng.sample(_TOPICS, 2)
            return f"The trade-off is simple: {a} {t1} versus {b} {t2}."
        if kind == 9:
            return f"If {s} {_third_person(v)} {o}, {s2} can {v2} {o2} {c(_ADVERBIALS)}."
        if kind == 10:
            ms = rng.choice((2, 5, 12, 20, 35, 80))
            return f"Roughly {ms} ms per step is typical for {s} {c(_ADVERBIALS)}."
        if kind == 11:
            return f'{_cap(s)} — the "{c(_TOPICS)}" part — {_third_person(v)} {o}.'
        return f"{_cap(s)} {_third_person(v)} {o} {c(_ADVERBIALS)}."


# --------------------------------------------------------------------------- scripts


def _match_script(scripts: Sequence[ScriptRule], user_text: str) -> ScriptRule | None:
    """The first rule whose regex is found in the last user message."""
    for rule in scripts:
        if re.search(rule.match, user_text):
            return rule
    return None


def _scripted(rule: ScriptRule, req: GenerationRequest, streams: _Streams) -> Generation:
    if rule.tool_name is not None:
        arguments = _dumps(dict(rule.tool_arguments or {}))
        call = ToolCall(_call_id(streams("call_id")), rule.tool_name, arguments)
        return _finish_tool_call(call, req.max_tokens)
    return _finish_text(rule.reply or "", req.max_tokens, req.stop)


# --------------------------------------------------------------------------- tool calls

_STOPWORDS = frozenset(
    "a an and are as at be by can do for from get give how i in is it me my of on or please "
    "show tell that the this to use what when where which who with you your".split()
)


def _wants_tool(req: GenerationRequest, last_role: str) -> bool:
    """Call a tool when forced/required, or in auto mode right after a user turn.

    After a tool result the model answers in text, so an agent loop always terminates.
    """
    if not req.tools or req.tool_choice == "none":
        return False
    if req.tool_choice == "auto":
        return last_role == "user"
    return True  # "required" or a forced tool name


def _tool_reply(
    req: GenerationRequest, quality: QualityProfile, streams: _Streams, user_text: str
) -> Generation:
    tool = _pick_tool(req, streams("tool"), user_text)
    params = _object_schema(tool.parameters)
    arguments = generate_value(params, streams("arguments"), context=user_text)
    if not isinstance(arguments, dict):
        arguments = {}
    call = ToolCall(_call_id(streams("call_id")), tool.name, _dumps(arguments))
    rng = streams("botch")
    if quality.tool_error_rate > 0 and rng.random() < quality.tool_error_rate:
        call = _botch(call, arguments, tool, req.tools, quality, rng)
    return _finish_tool_call(call, req.max_tokens)


def _pick_tool(req: GenerationRequest, rng: random.Random, user_text: str) -> ToolSpec:
    """The forced tool, else the one sharing most words with the user, else a random one."""
    if req.tool_choice not in ("auto", "required", "none"):
        for tool in req.tools:
            if tool.name == req.tool_choice:
                return tool
        raise ValueError(f"tool_choice names an unknown tool: {req.tool_choice!r}")
    wanted = _words(user_text)
    scores = [len(wanted & (_words(t.name) | _words(t.description))) for t in req.tools]
    best = max(scores)
    candidates = [t for t, s in zip(req.tools, scores, strict=True) if s == best]
    return rng.choice(candidates)


def _words(text: str) -> set[str]:
    """Lower-case content words; snake_case and camelCase names are split into words."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return {w for w in re.findall(r"[a-z0-9]+", spaced.lower()) if w not in _STOPWORDS}


def _object_schema(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """Tool parameters are always an object, even when the definition leaves ``type`` out."""
    return params if "type" in params else {"type": "object", **params}


def _call_id(rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "call_" + "".join(rng.choice(alphabet) for _ in range(24))


def _dumps(value: Any) -> str:
    """Compact JSON, as models emit arguments."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _finish_tool_call(call: ToolCall, cap: int | None) -> Generation:
    """Pieces are the argument tokens (tool=0); a cap truncates the arguments themselves."""
    tokens = tokenize(call.arguments)
    finish = "tool_calls"
    if cap is not None and len(tokens) > cap:
        tokens = tokens[: max(cap, 0)]
        call = ToolCall(call.id, call.name, "".join(tokens), call.botched)
        finish = "length"
    pieces = tuple(Piece(t, 0) for t in tokens)
    return Generation(pieces=pieces, text="", tool_calls=(call,), finish_reason=finish)


# --------------------------------------------------------------------------- botching

_NAME_SWAPS = {
    "get": "fetch", "fetch": "get", "search": "find", "find": "search", "create": "make",
    "make": "create", "list": "get_all", "read": "open", "write": "save", "save": "store",
    "run": "execute", "execute": "run", "send": "post", "update": "modify", "delete": "remove",
    "remove": "delete", "lookup": "search", "query": "search",
}  # fmt: skip
_NAME_SUFFIXES = ("_v2", "_tool", "_api", "_info", "s")
_INVENTED = (
    ("verbose", True), ("format", "json"), ("timeout_ms", 30000), ("session_id", "abc123"),
    ("include_metadata", True), ("dry_run", False), ("locale", "en-US"), ("max_results", 10),
)  # fmt: skip


def _botch(
    call: ToolCall,
    arguments: dict[str, Any],
    tool: ToolSpec,
    tools: Sequence[ToolSpec],
    quality: QualityProfile,
    rng: random.Random,
) -> ToolCall:
    """Make one of the mistakes a weak model makes; the kind is drawn by weight."""
    required = [k for k in _object_schema(tool.parameters).get("required") or () if k in arguments]
    weights = {k: float(w) for k, w in quality.error_kinds.items() if k in BOTCH_KINDS and w > 0}
    if not required:
        weights.pop("missing_required", None)  # nothing to drop: make another mistake
    if not weights:
        return call
    kind = rng.choices(list(weights), weights=list(weights.values()))[0]
    if kind == "malformed_json":
        return ToolCall(call.id, call.name, _malform(call.arguments, rng), kind)
    if kind == "unknown_tool":
        return ToolCall(call.id, _wrong_name(tool.name, tools, rng), call.arguments, kind)
    if kind == "missing_required":
        victim = rng.choice(required)
        dropped = {k: v for k, v in arguments.items() if k != victim}
        return ToolCall(call.id, call.name, _dumps(dropped), kind)
    props = _object_schema(tool.parameters).get("properties") or {}
    unused = [(k, v) for k, v in _INVENTED if k not in props and k not in arguments]
    name, value = rng.choice(unused) if unused else ("extra_argument_x", 1)
    return ToolCall(call.id, call.name, _dumps({**arguments, name: value}), kind)


def _malform(text: str, rng: random.Random) -> str:
    """Truncated JSON, a missing closing brace, or a missing closing quote: never parseable."""
    how = rng.randrange(3)
    if how == 0:
        broken = text[: rng.randint(1, max(1, len(text) - 1))]
    elif how == 1 or '"' not in text:
        broken = text[:-1]  # drop the closing brace
    else:
        i = text.rindex('"')  # the last quote always closes a string: the string never ends
        broken = text[:i] + text[i + 1 :]
    try:
        json.loads(broken)
    except ValueError:
        return broken
    return text[:-1] or "{"  # pragma: no cover - belt and braces


def _wrong_name(name: str, tools: Sequence[ToolSpec], rng: random.Random) -> str:
    """A plausible name that no tool has: a near-synonym verb, or a stray suffix."""
    taken = {t.name for t in tools}
    head, sep, rest = name.partition("_")
    candidates = [f"{_NAME_SWAPS[head]}{sep}{rest}"] if head in _NAME_SWAPS else []
    candidates += [name + suffix for suffix in _NAME_SUFFIXES]
    candidates = [c for c in candidates if c not in taken and c != name]
    guess = rng.choice(candidates) if candidates else name + "_v2"
    while guess in taken:
        guess += "_v2"
    return guess
