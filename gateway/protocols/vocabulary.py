"""Each provider's words for the roles (``gateway.roles``): one table per wire vocabulary.

OpenAI's ``service_tier`` (Chat Completions, Completions, the Responses API over SSE and the
websocket): ``priority`` and ``fast`` both ask for the fast role and the response shows
``priority`` for either ("the response will show service_tier=priority regardless"); ``auto``,
``default`` and ``scale`` (without Scale Tier units) are served standard and echo ``default``;
``flex`` is flex. Anthropic's ``speed`` is ``standard`` or ``fast`` and ``usage.speed`` reports
what served. A new service tier is one row in the table it belongs to plus a route in the TOML.
"""

from __future__ import annotations

from ..roles import Vocabulary

OPENAI_SERVICE_TIERS = Vocabulary(
    param="service_tier",
    asked={"auto": "standard", "default": "standard", "scale": "standard",
           "priority": "fast", "fast": "fast", "flex": "flex"},
    echo={"standard": "default", "fast": "priority", "flex": "flex"},
    default_echo="default",
)

ANTHROPIC_SPEEDS = Vocabulary(
    param="speed",
    asked={"standard": "standard", "fast": "fast"},
    echo={"standard": "standard", "fast": "fast"},
    default_echo="standard",
)
