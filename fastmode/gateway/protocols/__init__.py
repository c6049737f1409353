"""The protocol plug-ins and the paths they serve (under ``/v1`` and ``/fast/v1``): each says
how its wire format looks (schema, translation to a ``TurnRequest``, encoder, vocabulary) and
knows nothing of the pipeline that runs it; imports ``values``, ``http``, ``stored`` and
``observe``."""

from __future__ import annotations

from fastmode.gateway.protocols.anthropic_messages import MessagesProtocol
from fastmode.gateway.protocols.base import Encoder, Protocol, RequestContext
from fastmode.gateway.protocols.events import Frames
from fastmode.gateway.protocols.openai_chat import ChatProtocol
from fastmode.gateway.protocols.openai_completions import CompletionsProtocol
from fastmode.gateway.protocols.openai_responses import ResponsesProtocol
from fastmode.gateway.protocols.openai_responses.compact import CompactProtocol

__all__ = ["ENDPOINTS", "Encoder", "Frames", "Protocol", "RequestContext", "for_path"]

CHAT = ChatProtocol()
RESPONSES = ResponsesProtocol()
MESSAGES = MessagesProtocol()
COMPLETIONS = CompletionsProtocol()
COMPACT = CompactProtocol()

# path under the API prefix -> the protocol that serves it
ENDPOINTS: dict[str, Protocol] = {
    "/chat/completions": CHAT,
    "/responses": RESPONSES,
    "/responses/compact": COMPACT,  # a compaction pass (gateway.protocols.openai_responses)
    "/messages": MESSAGES,
    "/completions": COMPLETIONS,
}


def for_path(path: str) -> Protocol:
    """The protocol whose error format a path answers in (OpenAI's unless it is Anthropic's)."""
    for prefix in ("/v1/messages", "/fast/v1/messages"):
        if path == prefix or path.startswith(prefix + "/"):
            return MESSAGES
    return CHAT
