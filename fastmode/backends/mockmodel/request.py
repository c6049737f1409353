"""The mock model's inputs and outputs: requests, tool specs, quality profiles, generations.

Plain frozen dataclasses with no behaviour beyond reading the wire shapes, so that the gateway's
front ends (Chat, Responses, Messages), the config and the generator share one vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BOTCH_KINDS = ("malformed_json", "unknown_tool", "missing_required", "invented_argument")
TEXT = -1  # ``Piece.tool`` of a token of the visible text
REASONING = -2  # ``Piece.tool`` of a reasoning token (thinking before the visible reply)


FUNCTION = "function"  # ``ToolSpec.kind``: arguments are a JSON object fitting ``parameters``
CUSTOM = "custom"  # a freeform tool (Responses ``custom``, e.g. ``apply_patch``): raw text input


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: a function (``parameters`` is its JSON schema, an object
    schema) or a freeform ``custom`` tool whose input is raw text (``grammar``, if any, is the
    Lark or regex definition the text must follow). ``namespace`` is the group a Responses
    ``namespace`` tool declared it in: the call is echoed back in it."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    kind: str = FUNCTION
    namespace: str = ""
    grammar: str = ""

    @classmethod
    def from_wire(cls, tool: Mapping[str, Any]) -> ToolSpec:
        """Accept the Chat (``{"type":"function","function":{...}}``), Responses (flat) and
        Anthropic (``input_schema``) shapes, so every front end can build the same spec."""
        inner = tool.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
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
    structured_error_rate: float = 0.0  # probability that a structured output is botched


DEFAULT_QUALITY = QualityProfile()


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """A structured output: JSON that fits ``schema`` (``json_schema``), or any JSON object
    (``json_object``). ``strict`` is the request's flag (its schema was checked against the
    strict subset at the edge)."""

    kind: str  # "json_schema" | "json_object"
    schema: Mapping[str, Any] | None = None
    name: str = ""
    strict: bool = False


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
    response_format: ResponseFormat | None = None  # structured output (None: free text)
    effort: str | None = None  # reasoning effort (backends.reasoning.EFFORTS); None: default
    thinking_budget: int | None = None  # Anthropic budget_tokens: a cap on reasoning tokens
    summary: str | None = None  # Responses reasoning.summary: auto | concise | detailed
    parallel_tool_calls: bool = True  # several tool calls in one turn allowed
    # output tokens reasoning may use beyond ``max_tokens`` (a request that set no cap of its
    # own: the server's default caps the visible reply, the context window the reasoning)
    reasoning_room: int = 0

    def capped(self, max_tokens: int, model: str, reasoning_room: int) -> GenerationRequest:
        """This request with its cap, model and reasoning room set: ``dataclasses.replace``
        without its walk of the fields (~2 us, on every request)."""
        return GenerationRequest(
            self.messages, max_tokens, self.stop, self.seed, self.temperature, self.tools,
            self.tool_choice, self.ignore_eos, model, self.response_format, self.effort,
            self.thinking_budget, self.summary, self.parallel_tool_calls, reasoning_room)


@dataclass(frozen=True, slots=True)
class Piece:
    """One output token: message content (``tool == TEXT``), reasoning (``REASONING``) or a
    fragment of tool call k's arguments (``tool == k``)."""

    text: str
    tool: int = TEXT


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call; ``arguments`` is the raw JSON text (malformed if botched that way)."""

    id: str
    name: str
    arguments: str  # a custom tool's call: its raw input text
    botched: str | None = None  # which BOTCH_KINDS mistake was made, None if none
    kind: str = FUNCTION  # CUSTOM: a freeform tool's call (Responses ``custom_tool_call``)
    namespace: str = ""  # the Responses namespace the called tool was declared in


@dataclass(frozen=True, slots=True)
class Reasoning:
    """The thinking before the visible reply: the first ``tokens`` pieces of a generation."""

    tokens: int
    text: str  # all of it (Anthropic's thinking block shows it)
    effort: str  # the effort it ran at, or "budget" for an Anthropic thinking budget
    summary: tuple[str, ...] = ()  # a Responses reasoning summary's parts (when asked for)


@dataclass(frozen=True, slots=True)
class Generation:
    """The whole reply, token by token; the server paces ``pieces`` out over time.

    Reasoning pieces (``REASONING``) come first: the engine generates them at the tier's speed
    before the first visible token, and they are billed as output."""

    pieces: tuple[Piece, ...]
    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    stop_sequence: str | None = None  # the stop string that ended the text, if one did
    reasoning: Reasoning | None = None

    @property
    def output_tokens(self) -> int:
        return len(self.pieces)

    @property
    def reasoning_tokens(self) -> int:
        return self.reasoning.tokens if self.reasoning is not None else 0


CUE_CHARS = 8192  # the mock model reads this much of each end of a message for its cues


def cue_text(text: str) -> str:
    """What the mock model reads of a user's message for its cues (length asked for, names,
    topic): all of it, or the first and last ``CUE_CHARS`` characters of a longer one. Its
    cue patterns cost up to ~1 us a character, so reading a 15 MB prompt whole would hold
    the server for seconds; what a user asks for is at a message's start or end."""
    if len(text) <= 2 * CUE_CHARS:
        return text
    return text[:CUE_CHARS] + "\n" + text[-CUE_CHARS:]


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
