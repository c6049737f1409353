"""Which tier serves a request, and how many tokens it may ask for.

A model id maps to a standard and a fast tier (``[routes.MODEL]``); the request picks one by its
path (``/fast/v1``), OpenAI's ``service_tier`` or Anthropic's ``speed``. Providers name the tiers
differently on the wire, so the labels live here too.
"""

from __future__ import annotations

from backends.engine import EngineSpec, Tier

from .config import Config
from .errors import APIError

FAST_SERVICE_TIERS = frozenset({"priority", "fast"})
# OpenAI's vocabulary for the tier that served a request
SERVICE_TIER_NAMES = {"standard": "default", "fast": "priority"}


def service_tier_label(tier: str) -> str:
    return SERVICE_TIER_NAMES.get(tier, "default")


class Router:
    def __init__(self, config: Config, spec: EngineSpec) -> None:
        self.config = config
        self.spec = spec

    @property
    def models(self) -> list[str]:
        return list(self.config.routes)

    def resolve(self, model: str, fast: bool) -> Tier:
        route = self.config.routes.get(model)
        if route is None:
            raise APIError(
                404,
                f"The model `{model}` does not exist or you do not have access to it. "
                f"Available: {', '.join(self.models)}.",
                param="model",
                code="model_not_found",
            )
        return self.spec.tiers[route.fast if fast else route.standard]

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
