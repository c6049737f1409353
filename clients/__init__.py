"""fastmode's Python client: streaming over HTTP or one websocket, typed events, summaries.

It speaks the public wire formats only (OpenAI Chat Completions and Responses, and the
Responses WebSocket mode), so it works against any OpenAI-compatible server.
"""

from .client import TIERS, ChatParser, Client, ResponsesParser, Stream, tier_url
from .events import Done, Error, Event, Summary, TextDelta, ToolCall, ToolCallDelta, Usage

__all__ = [
    "TIERS",
    "ChatParser",
    "Client",
    "Done",
    "Error",
    "Event",
    "ResponsesParser",
    "Stream",
    "Summary",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "tier_url",
]
