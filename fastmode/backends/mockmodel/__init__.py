"""What the mock model says: text replies, tool calls, structured outputs, reasoning.

Everything here is a pure function of the request: no clock, no I/O. The serving simulation
decides *when* each token is emitted; this package decides *what* the tokens are, so that clients
see plausible, varied output whose token counts agree with ``backends.tokenizer`` everywhere.

One module per job: ``request`` (the data types), ``behavior`` (what a model does: reasoning,
reply lengths, parallel calls), ``streams`` (seeded randomness, one stream per decision),
``thinking`` (the reasoning before a reply), ``lengths`` (how long a reply should be),
``prose`` (the text writer), ``toolcalls`` (which tools, which arguments), ``structured``
(JSON replies), ``schema_values`` / ``schema_strings`` (JSON values that fit a schema),
``schema_subset`` (which schemas a request may use), ``prompted_json`` (JSON a prompt asks
for, with ``named_keys`` and ``type_notes``), ``field_markers`` (DSPy's field markers),
``entities`` (what a prompt states, for extraction), ``botching`` (the quality profile's
mistakes), ``scripts`` (configured replies), ``pieces`` (caps and stop sequences, token by
token) and ``schema_check`` (validating values with ``jsonschema``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fastmode.backends.mockmodel.agent import agent_reply, safe_tools
from fastmode.backends.mockmodel.behavior import (
    DEFAULT_BEHAVIOR,
    REPLY_KINDS,
    ModelBehavior,
    ReplyLengths,
)
from fastmode.backends.mockmodel.botching import maybe_botch
from fastmode.backends.mockmodel.edit_formats import edit_format_reply
from fastmode.backends.mockmodel.field_markers import asked_fields, marker_reply
from fastmode.backends.mockmodel.phrases import bank
from fastmode.backends.mockmodel.pieces import finish_tool_calls, with_reasoning
from fastmode.backends.mockmodel.prompted_json import prompted_json
from fastmode.backends.mockmodel.prose import (
    last_user_text,
    text_reply,
    tool_result_opener,
    tool_result_reply,
)
from fastmode.backends.mockmodel.request import (
    BOTCH_KINDS,
    CUE_CHARS,
    DEFAULT_QUALITY,
    REASONING,
    TEXT,
    Generation,
    GenerationRequest,
    Piece,
    QualityProfile,
    Reasoning,
    ResponseFormat,
    ScriptRule,
    ToolCall,
    ToolSpec,
    cue_text,
    message_text,
)
from fastmode.backends.mockmodel.schema_check import validate_arguments, validate_value
from fastmode.backends.mockmodel.schema_subset import SchemaRejected, check_schema
from fastmode.backends.mockmodel.schema_values import generate_value
from fastmode.backends.mockmodel.scripts import match_script, scripted
from fastmode.backends.mockmodel.streams import Streams
from fastmode.backends.mockmodel.structured import structured_reply
from fastmode.backends.mockmodel.thinking import think
from fastmode.backends.mockmodel.toolcalls import make_calls, wants_tool

__all__ = [
    "warm",
    "BOTCH_KINDS",
    "CUE_CHARS",
    "DEFAULT_BEHAVIOR",
    "DEFAULT_QUALITY",
    "REASONING",
    "REPLY_KINDS",
    "TEXT",
    "Generation",
    "GenerationRequest",
    "ModelBehavior",
    "Piece",
    "QualityProfile",
    "Reasoning",
    "ReplyLengths",
    "ResponseFormat",
    "SchemaRejected",
    "ScriptRule",
    "ToolCall",
    "ToolSpec",
    "check_schema",
    "cue_text",
    "generate",
    "generate_value",
    "message_text",
    "validate_arguments",
    "validate_value",
]


def warm() -> None:
    """Compose the writer's phrase bank now (``phrases``, ~60 ms), so no request waits for it."""
    bank()


def generate(
    req: GenerationRequest,
    quality: QualityProfile = DEFAULT_QUALITY,
    scripts: Sequence[ScriptRule] = (),
    behavior: ModelBehavior = DEFAULT_BEHAVIOR,
) -> Generation:
    """The mock model's reply to ``req``: its reasoning (if the model thinks at the request's
    effort), then a scripted answer, tool calls, a structured output or free text.

    ``max_tokens`` caps reasoning and reply together (reasoning first, as a model generates
    them), but reasoning never takes the whole cap: the reply keeps the room it needs, up to
    half the cap (a short answer or a tool call whole, a long one at least half the cap).
    ``reasoning_room`` is extra room for reasoning alone, for requests that set no cap.
    """
    streams = Streams(req)  # hashed when a stream is first asked for
    reply = _reply(req, quality, scripts, behavior, streams)
    if req.max_tokens is None:
        return with_reasoning(reply, think(req, behavior.reasoning, streams, None))
    total = req.max_tokens + req.reasoning_room
    reserve = max(1, min(reply.output_tokens, (req.max_tokens + 1) // 2))
    reasoning = think(req, behavior.reasoning, streams, max(0, total - reserve))
    if reasoning is not None:
        visible = min(req.max_tokens, total - reasoning.tokens)
        if visible < reply.output_tokens:  # the cap cuts the reply: a prefix of it
            reply = _reply(dataclasses.replace(req, max_tokens=visible), quality, scripts,
                           behavior, streams)
    return with_reasoning(reply, reasoning)


def _reply(req: GenerationRequest, quality: QualityProfile, scripts: Sequence[ScriptRule],
           behavior: ModelBehavior, streams: Streams) -> Generation:
    last = req.messages[-1] if req.messages else None
    last_role = str(last.get("role", "")) if last is not None else ""
    user_text = message_text(last) if last_role == "user" else ""
    if last_role == "user":
        rule = match_script(scripts, user_text, {t.name for t in req.tools})  # the whole text
        if rule is not None:
            return scripted(rule, req, streams)
    user_text = cue_text(user_text)
    agentic = agent_reply(req, streams, quality, behavior) if req.tools else None
    if agentic is not None:
        return agentic
    req = safe_tools(req) if req.tools else req
    if wants_tool(req, last_role):
        calls = []
        for k, (call, arguments, tool) in enumerate(make_calls(req, streams, user_text,
                                                               behavior)):
            rng = streams("botch" + (f"/{k}" if k else ""))
            calls.append(maybe_botch(call, arguments, tool, req.tools, quality, rng))
        return finish_tool_calls(calls, req.max_tokens)
    fmt = req.response_format
    if fmt is None and not req.tools and last_role in ("user", "system"):  # an agent's edit
        edited = edit_format_reply(req, streams)
        if edited is not None:
            return edited
    fields = asked_fields(req.messages) if fmt is None and last_role == "user" else None
    if fields is not None:  # DSPy's [[ ## field ## ]] markers
        return marker_reply(req, fields, streams, user_text)
    if fmt is None or fmt.kind == "json_object":  # the prompt may say which JSON
        asked = prompted_json(req.messages) if last_role in ("user", "tool") else None
        if asked is not None:
            return structured_reply(dataclasses.replace(req, response_format=asked.format),
                                    streams, last_user_text(req.messages), quality,
                                    fenced=asked.fenced and fmt is None)
    if fmt is not None:
        return structured_reply(req, streams, last_user_text(req.messages), quality)
    if last_role == "tool" and not req.ignore_eos:
        return tool_result_reply(req)
    opener = tool_result_opener(req.messages) if last_role == "tool" else None
    return text_reply(req, streams, opener, behavior.replies)
