"""Which tier serves a request, and how many tokens it may ask for.

A model id maps to a standard, a fast and optionally a flex tier (``[routes.MODEL]``); the
request picks one by its path (``/fast/v1``), OpenAI's ``service_tier`` or Anthropic's
``speed``. Providers name the tiers differently on the wire, so the labels live here too:

| OpenAI ``service_tier`` asked | served by | echoed |
|---|---|---|
| absent, ``auto``, ``default``, ``scale`` | the standard tier | ``default`` |
| ``priority``, ``fast`` (or the ``/fast/v1`` path) | the fast tier | ``priority`` |
| ``flex`` | the flex tier (400 if the model has none) | ``flex`` |

OpenAI answers ``priority`` for both ``fast`` and ``priority`` ("the response will show
service_tier=priority regardless"), ``default`` for ``auto`` and for ``scale`` without Scale Tier
units, and the tier actually used after a downgrade. Anthropic's ``speed`` is ``standard`` or
``fast``; ``usage.speed`` reports what served.
"""

from __future__ import annotations

from backends.engine import EngineSpec, Tier

from .config import Config
from .errors import APIError, retry_headers

FAST_SERVICE_TIERS = frozenset({"priority", "fast"})
FLEX_SERVICE_TIER = "flex"
SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority", "fast")
# OpenAI's vocabulary for the tier that served a request
SERVICE_TIER_NAMES = {"standard": "default", "fast": "priority", "flex": "flex"}


def service_tier_label(tier: str) -> str:
    return SERVICE_TIER_NAMES.get(tier, "default")


def flex_unavailable(model: str) -> APIError:
    return APIError(400, f"service_tier 'flex' is not available for the model `{model}`; use "
                    "'auto' or 'default'.", param="service_tier", code="invalid_value")


def flex_busy(tier: str, retry_s: float) -> APIError:
    """Flex capacity is short: 429, which the SDKs retry (OpenAI: "Resource Unavailable",
    not billed)."""
    return APIError(429, f"Resource unavailable: the {tier} pool is at capacity. Retry later, "
                    "or send the request with service_tier 'auto'.",
                    code="resource_unavailable", type="requests", headers=retry_headers(retry_s))


class Router:
    def __init__(self, config: Config, spec: EngineSpec) -> None:
        self.config = config
        self.spec = spec

    @property
    def models(self) -> list[str]:
        return list(self.config.routes)

    def resolve(self, model: str, fast: bool, flex: bool = False) -> Tier:
        route = self.config.routes.get(model)
        if route is None:
            raise APIError(
                404,
                f"The model `{model}` does not exist or you do not have access to it. "
                f"Available: {', '.join(self.models)}.",
                param="model",
                code="model_not_found",
            )
        if fast:
            return self.spec.tiers[route.fast]
        if flex:
            if route.flex is None:
                raise flex_unavailable(model)
            return self.spec.tiers[route.flex]
        return self.spec.tiers[route.standard]

    def is_flex(self, model: str, tier: str) -> bool:
        route = self.config.routes.get(model)
        return route is not None and route.flex == tier and route.standard != tier

    def max_output(self, tier: Tier, prompt_tokens: int, requested: int | None) -> int:
        """The output cap: the request's, else the server default, within the context window."""
        window = tier.context_window
        if requested is not None:
            if prompt_tokens + requested > window:
                raise APIError(
                    400,
                    f"This model's maximum context length is {window} tokens. However, you "
                    f"requested {prompt_tokens + requested} tokens ({prompt_tokens} in the "
                    f"messages, {requested} in the completion). Please reduce the length of "
                    f"the messages or completion.",
                    param="messages",
                    code="context_length_exceeded",
                )
            return requested
        if prompt_tokens >= window:
            raise APIError(
                400,
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {prompt_tokens} tokens. Please reduce the length of "
                f"the messages.",
                param="messages",
                code="context_length_exceeded",
            )
        return min(self.config.server.default_max_tokens, window - prompt_tokens)
