"""API keys and per-tier rate limits (off unless ``[auth] enabled = true``).

Limits are token buckets per (key, tier): a bucket holds one minute's allowance and refills
continuously, the way providers' ``x-ratelimit-*`` headers describe them. The fast tier has its
own bucket, so fast traffic does not eat the standard allowance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .config import ApiKey, AuthConfig
from .errors import APIError, retry_headers


@dataclass
class Bucket:
    capacity: float  # per minute
    level: float
    stamp: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.capacity / 60.0)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` is available."""
        short = amount - self.level
        return 0.0 if short <= 0 else short * 60.0 / self.capacity

    def reset_in(self) -> float:
        return (self.capacity - self.level) * 60.0 / self.capacity


@dataclass
class Principal:
    key: ApiKey
    buckets: dict[str, tuple[Bucket | None, Bucket | None]] = field(default_factory=dict)


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``12ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    return f"{int(seconds // 60)}m{int(seconds % 60)}s"


class Authenticator:
    def __init__(self, config: AuthConfig, clock=time.monotonic) -> None:
        self.enabled = config.enabled
        self.clock = clock
        self._keys = {k.key: Principal(k) for k in config.keys}

    def authenticate(self, authorization: str | None) -> Principal | None:
        if not self.enabled:
            return None
        token = ""
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer":
                token = ""
        principal = self._keys.get(token.strip())
        if principal is None:
            shown = (token[:3] + "***" + token[-4:]) if len(token) > 8 else "***"
            raise APIError(
                401,
                f"Incorrect API key provided: {shown}." if token else
                "You didn't provide an API key. Send it as `Authorization: Bearer <key>`.",
                code="invalid_api_key",
            )
        return principal

    def check(self, principal: Principal | None, tier: str, tokens: int) -> dict[str, str]:
        """Take one request and ``tokens`` from the tier's buckets; 403/429 when not allowed.

        Returns the ``x-ratelimit-*`` headers to send.
        """
        if principal is None:
            return {}
        key = principal.key
        if key.tiers and tier not in key.tiers:
            raise APIError(
                403,
                f"This API key may not use the {tier} tier (allowed: {', '.join(key.tiers)}).",
                code="tier_not_allowed",
            )
        limit = key.limits.get(tier)
        if limit is None:
            return {}
        now = self.clock()
        if tier not in principal.buckets:
            principal.buckets[tier] = (
                Bucket(limit.requests_per_minute, limit.requests_per_minute, now)
                if limit.requests_per_minute else None,
                Bucket(limit.tokens_per_minute, limit.tokens_per_minute, now)
                if limit.tokens_per_minute else None,
            )
        req_b, tok_b = principal.buckets[tier]
        for b in (req_b, tok_b):
            if b is not None:
                b.refill(now)
        wait = max(
            req_b.wait_for(1) if req_b else 0.0,
            tok_b.wait_for(tokens) if tok_b else 0.0,
        )
        if tok_b is not None and tokens > tok_b.capacity:
            raise APIError(
                429,
                f"Request too large for {tier}: {tokens} tokens, limit "
                f"{int(tok_b.capacity)} per minute.",
                code="rate_limit_exceeded",
                type="tokens",
                headers=self._headers(req_b, tok_b),
            )
        if wait > 0:
            kind = "requests" if req_b and req_b.wait_for(1) > 0 else "tokens"
            raise APIError(
                429,
                f"Rate limit reached for {tier} on {kind} per minute. "
                f"Please try again in {_duration(wait)}.",
                code="rate_limit_exceeded",
                type=kind,
                headers={**self._headers(req_b, tok_b), **retry_headers(wait)},
            )
        if req_b:
            req_b.level -= 1
        if tok_b:
            tok_b.level -= tokens
        return self._headers(req_b, tok_b)

    @staticmethod
    def _headers(req_b: Bucket | None, tok_b: Bucket | None) -> dict[str, str]:
        h: dict[str, str] = {}
        if req_b is not None:
            h["x-ratelimit-limit-requests"] = str(int(req_b.capacity))
            h["x-ratelimit-remaining-requests"] = str(max(0, int(req_b.level)))
            h["x-ratelimit-reset-requests"] = _duration(req_b.reset_in())
        if tok_b is not None:
            h["x-ratelimit-limit-tokens"] = str(int(tok_b.capacity))
            h["x-ratelimit-remaining-tokens"] = str(max(0, int(tok_b.level)))
            h["x-ratelimit-reset-tokens"] = _duration(tok_b.reset_in())
        return h
