"""What a fault is, and the ``x-fastmode-fault`` header that asks for one.

``x-fastmode-fault: <kind>[;p=<probability>][;after=<tokens>][;s=<seconds>]``, e.g.
``429``, ``cut;after=20``, ``stall;after=5;s=3``, ``500;p=0.3``. Kinds:

* status faults, answered before any work, in the route's own error format: ``429`` (with
  ``retry-after`` and the ``x-ratelimit-*`` headers), ``500``, ``503``, ``529`` (Anthropic's
  ``overloaded_error``), ``fast-exhausted`` (the fast pool full: 429 or a downgrade, per
  ``server.fast_overflow``); ``s`` sets ``retry-after`` where there is one;
* ``timeout``: nothing at all for ``s`` seconds before the response starts (a client timeout);
* mid-stream faults, after ``after`` output tokens: ``stall`` (a pause of ``s`` seconds),
  ``cut`` (the connection dropped: no terminal event, no ``[DONE]``), ``malformed`` (one broken
  SSE event or websocket frame, then the stream goes on), ``error-event`` (the protocol's error
  event, which ends the stream).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fastmode.gateway.errors import bad_request
from fastmode.gateway.fault_kinds import KINDS, Kind
from fastmode.gateway.values.key_ids import key_id

HEADER = "x-fastmode-fault"
TEST_ID_HEADER = "x-fastmode-test-id"
MAX_SECONDS = 3600.0
MAX_AFTER = 1_000_000


@dataclass(frozen=True)
class Fault:
    kind: Kind
    p: float = 1.0
    after: int = 0
    s: float | None = None
    source: str = "header"  # header | config | admin
    tier: str | None = None  # a rule's match fields (None: any)
    key: str | None = None
    model: str | None = None

    def matches(self, tier: str, key: str, model: str) -> bool:
        return ((self.tier is None or self.tier == tier)
                and (self.key is None or self.key in (key, key_id(key)))  # a key or its id
                and (self.model is None or self.model == model))

    def seconds(self, default: float) -> float:
        return default if self.s is None else self.s

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "p": self.p, "after": self.after}
        for name in ("s", "tier", "key", "model"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def _number(name: str, raw: str, lo: float, hi: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not lo <= value <= hi:  # NaN fails too
        raise bad_request(f"Invalid '{HEADER}' header: {name}={raw!r} must be a number from "
                          f"{lo:g} to {hi:g}.", param=HEADER, code="invalid_fault")
    return value


def parse_header(value: str) -> Fault:
    """The fault a header asks for; a 400 naming the problem if it is malformed."""
    parts = [p.strip() for p in value.split(";")]
    kind = parts[0].lower()
    if kind not in KINDS:  # a StrEnum: its members are equal to their strings
        raise bad_request(f"Invalid '{HEADER}' header: unknown kind {parts[0][:40]!r}; "
                          f"expected one of {', '.join(sorted(KINDS))}.", param=HEADER,
                          code="invalid_fault")
    fields: dict[str, Any] = {}
    for part in parts[1:]:
        name, eq, raw = part.partition("=")
        name = name.strip().lower()
        if not eq or name not in ("p", "after", "s") or name in fields:
            raise bad_request(f"Invalid '{HEADER}' header: {part[:40]!r}; expected "
                              "p=<probability>, after=<tokens> or s=<seconds>, once each.",
                              param=HEADER, code="invalid_fault")
        if name == "p":
            fields["p"] = _number("p", raw.strip(), 0.0, 1.0)
        elif name == "after":
            fields["after"] = int(_number("after", raw.strip(), 0, MAX_AFTER))
        else:
            fields["s"] = _number("s", raw.strip(), 0.0, MAX_SECONDS)
    return Fault(Kind(kind), **fields)


def from_rule(rule: Any, source: str) -> Fault:
    """A configured (``FaultRule``) or admin (dict) rule as a ``Fault``."""
    d = rule.model_dump() if hasattr(rule, "model_dump") else dict(rule)
    return Fault(Kind(d["kind"]), float(d.get("p", 1.0)), int(d.get("after", 0)), d.get("s"),
                 source, d.get("tier"), d.get("key"), d.get("model"))
