"""Which tier serves a request, and how many tokens it may ask for.

A model id maps each role (``gateway.values.roles``: standard, fast, flex, ...) to a tier
(``[routes.MODEL]``); the protocol's vocabulary has already turned the wire's words
(``service_tier``, ``speed``, the ``/fast/v1`` path) into the role asked for. Routing gives a
``Routed``: the role that serves and its tier, and the tier a premium role falls back to. A
model whose route has no tier of its own for a role serves it standard or refuses it, as the
role says (``Role.if_absent``); a premium role routed to the standard tier itself (e.g.
``frontier-spark``, whose fast and standard are one pool) is the standard role.

The roles a route hands out carry the model's own echo words (``Role.echo``), and a ``Routed``
carries the model's ``PriceRule`` (``gateway.values.price_eras``): what the request is billed follows
the model id and the role that serves it, never a tier's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmode.backends.engine import EngineSpec, Tier
from fastmode.gateway.config import Config
from fastmode.gateway.errors import APIError, retry_headers
from fastmode.gateway.values.price_eras import PriceRule
from fastmode.gateway.values.roles import STANDARD, Role, role

MAX_CACHED_ROUTES = 4096  # (model, role) pairs resolved once; past it, resolved per request


@dataclass(frozen=True)
class Routed:
    role: Role  # the role that serves (the one asked, or standard: see above)
    tier: Tier  # the tier serving that role for this model
    standard: Tier  # the model's standard tier (where a premium role overflows to)
    standard_role: Role = STANDARD  # the standard role as this model echoes it
    pricing: PriceRule | None = None  # the model's prices per role (None: the tiers')


def role_unavailable(model: str, asked: str, param: str = "service_tier") -> APIError:
    return APIError(400, f"{param} {asked!r} is not available for the model `{model}`; omit "
                    f"{param} to be served at the standard speed.", param=param,
                    code="invalid_value")


def busy(asked: Role, retry_s: float) -> APIError:
    """A pool that answers "later" when busy (flex): 429, which the SDKs retry (OpenAI:
    "Resource Unavailable", not billed)."""
    return APIError(429, f"Resource unavailable: the {asked.name} capacity is exhausted. Retry "
                    "later, or send the request with service_tier 'auto'.",
                    code="resource_unavailable", type="requests", headers=retry_headers(retry_s))


class Router:
    def __init__(self, config: Config, spec: EngineSpec) -> None:
        self.config = config
        self.spec = spec
        reference = spec.tiers[config.pricing.reference_tier].prices
        self.pricing = {m: PriceRule.of_route(r, reference) for m, r in config.routes.items()}
        # (model, role asked) -> Routed: the config is fixed, so a route is resolved once
        self._routed: dict[tuple[str, str], Routed] = {}
        # LoRA adapter -> the model id it adapts: served as that model's route
        # (gateway.engines.lora_registry keeps it)
        self.adapters: dict[str, str] = {}

    @property
    def models(self) -> list[str]:
        return list(self.config.routes)

    def route(self, model: str, asked: str = "standard", param: str = "service_tier"
              ) -> Routed:
        """The role and tier serving ``asked`` for ``model``: 404 for an unknown model, 400
        for a role the model does not offer and may not be served standard."""
        routed = self._routed.get((model, asked))
        if routed is None:
            routed = self._route(model, asked, param)
            if len(self._routed) < MAX_CACHED_ROUTES:  # pattern ids are the client's to pick
                self._routed[(model, asked)] = routed
        return routed

    def forget(self, model: str) -> None:
        """``model`` (an unloaded adapter) resolves anew from now on."""
        for k in [k for k in self._routed if k[0] == model]:
            del self._routed[k]

    def _route(self, model: str, asked: str, param: str) -> Routed:
        key = self.config.route_of(model)
        if key is None and model in self.adapters:
            key = self.config.route_of(self.adapters[model])
        if key is None and self.config.server.engine:  # vLLM's own answer
            raise APIError(404, f"The model `{model}` does not exist.", param="model",
                           code=404, type="NotFoundError")
        if key is None:
            raise APIError(
                404,
                f"The model `{model}` does not exist or you do not have access to it. "
                f"Available: {', '.join(self.models)}.",
                param="model",
                code="model_not_found",
            )
        route = self.config.routes[key]
        tiers = route.roles()
        standard = self.spec.tiers[tiers["standard"]]
        std_role = STANDARD.on_route(route.echo.get(STANDARD.name))
        pricing = self.pricing[key]
        wanted = role(asked)
        name = tiers.get(wanted.name)
        if name is None:
            if wanted.if_absent == "refuse":
                raise role_unavailable(model, asked, param)
            return Routed(std_role, standard, standard, std_role, pricing)
        tier = self.spec.tiers[name]
        if tier is standard:  # a premium role on the standard pool itself is standard
            return Routed(std_role, standard, standard, std_role, pricing)
        return Routed(wanted.on_route(route.echo.get(wanted.name)), tier, standard, std_role,
                      pricing)

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
