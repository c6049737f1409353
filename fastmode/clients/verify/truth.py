"""What the server did, per request, from its traces (``gateway.observe.tracing``'s JSONL records).

Each record has Unix times for the request's arrival, each event's send (and its tokens), the
first and the last byte. From those, per request, the figures a load generator reports — and
the *wrong* variants a tool may compute instead, so ``compare`` can say which one it matches:

* TTFT: the first event that carries tokens (``ttft``); the first byte (``ttfb``: a tool that
  counts an opening event with no token, e.g. Responses' ``response.created``, as the first);
* ITL: every gap between token events divided by the tokens of the later event (``itl``, one
  value per token); per event (``itl_event``: a tool that divides by events, not tokens);
* TPOT: ``(last token − first token) / (tokens − 1)``; ``(e2e − ttft) / tokens`` (divides by N);
  ``(last token − arrival) / tokens`` (guidellm's: the first token's wait included);
* E2E: arrival to the last byte.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class Truth:
    """One request as the server served it (seconds; Unix times)."""

    request_id: str
    client_request_id: str | None
    response_id: str | None
    protocol: str
    tier: str
    arrival: float
    first_byte: float
    first_token: float | None
    last_token: float | None
    last_byte: float
    output_tokens: int
    token_events: int
    gaps: list[tuple[float, int]] = field(default_factory=list)  # (gap s, tokens of the event)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def ttfb(self) -> float:
        return self.first_byte - self.arrival

    @property
    def e2e(self) -> float:
        return self.last_byte - self.arrival

    @property
    def tpot(self) -> float | None:
        if self.first_token is None or self.last_token is None or self.output_tokens < 2:
            return None
        return (self.last_token - self.first_token) / (self.output_tokens - 1)

    @property
    def tpot_by_n(self) -> float | None:
        """``(e2e − ttft) / tokens``: a TPOT that divides by N, not N − 1."""
        ttft = self.ttft
        if ttft is None or not self.output_tokens:
            return None
        return (self.e2e - ttft) / self.output_tokens

    def itl(self) -> list[float]:
        """One inter-token latency per token after the first (an event of k tokens after a gap
        g: k values of g / k, as a server that sent the tokens evenly would show)."""
        out: list[float] = []
        for gap, k in self.gaps:
            out.extend([gap / k] * k)
        return out

    def itl_event(self) -> list[float]:
        return [gap for gap, _ in self.gaps]


def from_record(rec: dict[str, Any]) -> Truth | None:
    """A trace record as a ``Truth``; None for a request that sent nothing (refused)."""
    events = rec.get("events") or []
    if not events or rec.get("first_byte") is None:
        return None
    sent = [(e["sent"], e["tokens"]) for e in events if e["tokens"]]
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(sent, sent[1:], strict=False)]
    return Truth(rec["request_id"], rec.get("client_request_id"), rec.get("response_id"),
                 rec.get("protocol", ""), rec.get("tier", ""), rec["arrival"],
                 rec["first_byte"], rec.get("first_token"), rec.get("last_token"),
                 rec["last_byte"], rec.get("output_tokens", 0), rec.get("token_events", 0),
                 gaps)


def parse(lines: Iterable[str]) -> list[Truth]:
    out = []
    for line in lines:
        if line.strip():
            t = from_record(json.loads(line))
            if t is not None:
                out.append(t)
    return out


def load(source: str, since: int = 0, api_key: str | None = None) -> list[Truth]:
    """The traces in a JSONL file, or from a server's ``/v1/fastmode/traces`` (a URL)."""
    if source.startswith(("http://", "https://")):
        url = source.rstrip("/")
        if not url.endswith("/fastmode/traces"):
            url += "/v1/fastmode/traces"
        req = urllib.request.Request(f"{url}?since={since}")
        if api_key:
            req.add_header("Authorization", f"Bearer {api_key}")
        with urllib.request.urlopen(req, timeout=60) as r:  # noqa: S310 - the user's server
            return parse(r.read().decode().splitlines())
    text = Path(source).read_text()
    lines = text.splitlines()
    if since:
        lines = [ln for ln in lines if ln.strip() and json.loads(ln).get("seq", 0) > since]
    return parse(lines)
