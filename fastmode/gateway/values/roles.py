"""Roles: what a request asks for (standard, fast, flex, ...), apart from which tier serves it.

A *role* is the speed/price class a client buys: the words on the wire (OpenAI's
``service_tier``, Anthropic's ``speed``, the ``/fast/v1`` path) map to a role through a
protocol's ``Vocabulary``; the config's routes (``[routes.MODEL]``) map a role to a *tier* (a
pool in the TOML, named whatever its operator likes). Everything after routing reads the role
for behaviour (limits, the overflow policy, what the response echoes) and the tier for physics
and prices, so renaming a tier in the TOML changes nothing a client sees.

A role's behaviour is data here, not an ``if name == "fast"`` anywhere else:

| role | premium (own fast-mode limits, overflow when full) | when busy | a model without it |
|---|---|---|---|
| ``standard`` | no | overload status (503/529) | (every route has one) |
| ``fast`` | yes: ``server.fast_overflow`` downgrades to standard or answers 429 | — | served standard |
| ``flex`` | no | 429 ``resource_unavailable`` | 400 |
| ``ultrafast`` | yes: its own limits and ``anthropic-fast-*`` headers, the same overflow | — | 400 |
| any other a config adds | yes | — | 400 |

What a response echoes for a role is its protocol's ``Vocabulary`` word, unless the model's
route says otherwise (``[routes.MODEL.echo]``): OpenAI echoes ``"fast"`` for models launched
after priority processing was renamed Fast mode and ``"priority"`` for older ones. That is a
property of the model id, carried by the ``Role`` the router hands out for that route
(``Role.echo``), so an encoder asks ``vocabulary.label(job.role)`` and never looks at a model or
a tier's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from fastmode.gateway.errors import APIError


@dataclass(frozen=True)
class Role:
    name: str
    # sold as faster than standard: the key's fast-mode limits and headers apply
    # (Anthropic's anthropic-fast-*), and a full pool follows ``server.fast_overflow``
    premium: bool = True
    busy: Literal["overloaded", "retry_later"] = "overloaded"  # flex: 429, which SDKs retry
    # a model whose route has no tier for this role: serve it standard (OpenAI serves
    # ``priority`` as default where priority is not offered) or refuse it with a 400
    if_absent: Literal["standard", "refuse"] = "refuse"
    # the words one model's route echoes for this role where they differ from the protocol's
    # vocabulary: (wire parameter, word) pairs, e.g. (("service_tier", "fast"),)
    echo: tuple[tuple[str, str], ...] = ()

    def on_route(self, echo: Mapping[str, str] | None) -> Role:
        """This role as one model's route serves it: with the route's echo words (param ->
        word), or as it is."""
        return replace(self, echo=tuple(sorted(echo.items()))) if echo else self


STANDARD = Role("standard", premium=False, if_absent="standard")
FAST = Role("fast", premium=True, if_absent="standard")
FLEX = Role("flex", premium=False, busy="retry_later", if_absent="refuse")
# OpenAI's "ultrafast" service tier: sold as faster than fast (its own rate limits), refused on
# a model that does not offer it, a full pool downgraded to standard like fast's
ULTRAFAST = Role("ultrafast", premium=True, if_absent="refuse")
BUILTIN: dict[str, Role] = {r.name: r for r in (STANDARD, FAST, FLEX, ULTRAFAST)}


def role(name: str) -> Role:
    """The role called ``name``: a built-in one, else a premium role refused where absent
    (what a new paid speed needs)."""
    return BUILTIN.get(name) or Role(name)


@dataclass(frozen=True)
class Vocabulary:
    """One protocol's words for roles: what a request may say and what a response echoes.

    ``asked``: wire word -> role name; ``echo``: role name -> the word echoed for the role that
    served (``default_echo`` for a role the protocol has no word for). Adding a service tier is
    one row here plus a route in the TOML."""

    param: str  # the request field, named in the 400 for an unknown word
    asked: Mapping[str, str]
    echo: Mapping[str, str]
    default_echo: str
    path_role: str = "fast"  # the role of a request on ``/fast/v1``
    words: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(self.asked))

    def role_of(self, word: str | None, fast_path: bool = False) -> str:
        """The role asked for: the word's (400 for an unknown word), else the path's."""
        if word is None:
            return self.path_role if fast_path else STANDARD.name
        name = self.asked.get(word)
        if name is None:
            allowed = ", ".join(repr(w) for w in self.asked)
            raise APIError(400, f"Invalid value for '{self.param}': {word!r}. Supported "
                           f"values are: {allowed}.", param=self.param, code="invalid_value")
        return self.path_role if fast_path else name  # /fast/v1 decides, as it always has

    def label(self, served: Role | str) -> str:
        """The word echoed for the role that served the request: the model's own word for it
        (``Role.echo``, from its route), else this vocabulary's."""
        if isinstance(served, Role):
            for param, word in served.echo:
                if param == self.param:
                    return word
            served = served.name
        return self.echo.get(served, self.default_echo)
