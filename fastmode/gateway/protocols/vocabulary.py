"""Each provider's words for the roles (``gateway.values.roles``): one table per wire vocabulary.

OpenAI's ``service_tier`` (Chat Completions, Completions, the Responses API over SSE and the
websocket): ``priority`` and ``fast`` both ask for the fast role and the response shows
``priority`` for either ("the response will show service_tier=priority regardless"); ``auto``,
``default`` and ``scale`` (without Scale Tier units) are served standard and echo ``default``;
``flex`` is flex; ``ultrafast`` (OpenAI's fastest tier, late 2026) is ultrafast, echoed
``ultrafast``. A model launched after priority was renamed Fast mode echoes ``fast`` instead of
``priority``: that is the model's route (``[routes.MODEL.echo]``, carried by ``Role.echo``),
not a row here. Anthropic's ``speed`` is ``standard`` or ``fast`` and ``usage.speed`` reports
what served; ``ultrafast`` is a fastmode extension of it (Anthropic has no such speed), so a
Messages client reaches the same tier. A new service tier is one row in the table it belongs to
plus a route in the TOML.
"""

from __future__ import annotations

from fastmode.gateway.values.roles import Vocabulary

OPENAI_SERVICE_TIERS = Vocabulary(
    param="service_tier",
    asked={"auto": "standard", "default": "standard", "scale": "standard",
           "priority": "fast", "fast": "fast", "flex": "flex", "ultrafast": "ultrafast"},
    echo={"standard": "default", "fast": "priority", "flex": "flex", "ultrafast": "ultrafast"},
    default_echo="default",
)

ANTHROPIC_SPEEDS = Vocabulary(
    param="speed",
    asked={"standard": "standard", "fast": "fast", "ultrafast": "ultrafast"},
    echo={"standard": "standard", "fast": "fast", "ultrafast": "ultrafast"},
    default_echo="standard",
)
