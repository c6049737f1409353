"""What the mock model says: text replies, tool calls, scripted answers and botched calls.

Everything here is a pure function of the request: no clock, no I/O. The serving simulation
decides *when* each token is emitted; this package decides *what* the tokens are, so that clients
see plausible, varied output whose token counts agree with ``backends.tokenizer`` everywhere.

One module per job: ``request`` (the data types), ``streams`` (seeded randomness, one stream per
decision), ``prose`` (the text writer), ``toolcalls`` (which tool, which arguments),
``schema_values`` (JSON values that fit a schema), ``botching`` (the quality profile's
mistakes), ``scripts`` (configured replies), ``pieces`` (caps and stop sequences, token by
token) and ``schema_check`` (validating arguments with ``jsonschema``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .botching import maybe_botch
from .pieces import finish_tool_call
from .prose import text_reply, tool_result_opener
from .request import (
    BOTCH_KINDS,
    DEFAULT_QUALITY,
    Generation,
    GenerationRequest,
    Piece,
    QualityProfile,
    ScriptRule,
    ToolCall,
    ToolSpec,
    message_text,
)
from .schema_check import validate_arguments, validate_value
from .schema_values import generate_value
from .scripts import match_script, scripted
from .streams import Streams, request_digest
from .toolcalls import make_call, wants_tool

__all__ = [
    "BOTCH_KINDS",
    "DEFAULT_QUALITY",
    "Generation",
    "GenerationRequest",
    "Piece",
    "QualityProfile",
    "ScriptRule",
    "ToolCall",
    "ToolSpec",
    "generate",
    "generate_value",
    "message_text",
    "validate_arguments",
    "validate_value",
]


def generate(
    req: GenerationRequest,
    quality: QualityProfile = DEFAULT_QUALITY,
    scripts: Sequence[ScriptRule] = (),
) -> Generation:
    """The mock model's reply to ``req``: a scripted answer, a tool call, or free text."""
    streams = Streams(request_digest(req))
    last = req.messages[-1] if req.messages else None
    last_role = str(last.get("role", "")) if last is not None else ""
    user_text = message_text(last) if last_role == "user" else ""
    if last_role == "user":
        rule = match_script(scripts, user_text)
        if rule is not None:
            return scripted(rule, req, streams)
    if wants_tool(req, last_role):
        call, arguments, tool = make_call(req, streams, user_text)
        call = maybe_botch(call, arguments, tool, req.tools, quality, streams("botch"))
        return finish_tool_call(call, req.max_tokens)
    opener = tool_result_opener(req.messages) if last_role == "tool" else None
    return text_reply(req, streams, opener)
