"""API keys and per-tier rate limits (off unless ``[auth] enabled = true``).

Limits are token buckets per (key, tier): a bucket holds one minute's allowance and refills
continuously, the way providers' ``x-ratelimit-*`` headers describe them. The fast tier has its
own bucket, so fast traffic does not eat the standard allowance. Buckets live in the shared
state (``gateway.state``); every refusal (401/403/429) is reported to ``on_reject`` (metrics).
A turn takes from them with ``check_async`` (awaited before admission, ``gateway.pipeline.ratelimit``:
buckets in Redis are a network round trip); ``check`` is the same, synchronous, for buckets
kept in this process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fastmode.gateway.config import ApiKey, AuthConfig
from fastmode.gateway.errors import APIError, retry_headers
from fastmode.gateway.state import StateBackend, Take, Want, take_in_memory
from fastmode.gateway.values.key_ids import key_id


@dataclass
class Principal:
    key: ApiKey
    # the key's stored name (gateway.ownership): what the ledger, the buckets and the owner of
    # a stored object keep instead of the key
    id: str = field(init=False)

    def __post_init__(self) -> None:
        self.id = key_id(self.key.key)


# a refused key longer than this is named in the 401 by its first 3 and last 4 characters
# (OpenAI's ``sk-...abcd``); a shorter one is not named at all (7 of 9 characters is the key)
REDACT_MIN_LENGTH = 20


def redacted(token: str) -> str:
    """What a 401 may say of a refused key: ``sk-...abcd`` for a long key, nothing otherwise."""
    return f"{token[:3]}...{token[-4:]}" if len(token) >= REDACT_MIN_LENGTH else ""


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``12ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    return f"{int(seconds // 60)}m{int(seconds % 60)}s"


class Authenticator:
    def __init__(self, config: AuthConfig, clock: Callable[[], float] = time.monotonic,
                 state: StateBackend | None = None,
                 on_reject: Callable[[int, str], None] | None = None) -> None:
        self.enabled = config.enabled
        self.clock = clock
        self._keys = {k.key: Principal(k) for k in config.keys}
        # buckets live in the shared state (gateway.state) so several processes share limits
        self.state = state
        self._local: dict[str, list[float]] = {}  # buckets, without a shared state
        self.on_reject = on_reject  # (status, tier) -> None: counted in /metrics

    def _reject(self, error: APIError, tier: str = "") -> APIError:
        if self.on_reject is not None:
            self.on_reject(error.status, tier)
        return error

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
            shown = redacted(token.strip())
            raise self._reject(APIError(
                401,
                (f"Incorrect API key provided: {shown}." if shown else
                 "Incorrect API key provided.") if token else
                "You didn't provide an API key. Send it as `Authorization: Bearer <key>`.",
                code="invalid_api_key",
            ))
        return principal

    def check(self, principal: Principal | None, tier: str, tokens: int,
              input_tokens: int | None = None, output_tokens: int = 0,
              fast: bool = False) -> dict[str, str]:
        """Take one request and ``tokens`` (and, when the key limits them apart, the input and
        output tokens: Anthropic's ITPM / OTPM) from the tier's buckets; 403/429 when not
        allowed. ``fast``: the tier is a fast mode (Anthropic's own fast-mode limits).

        Returns the rate-limit headers to send: OpenAI's ``x-ratelimit-*`` and Anthropic's
        ``anthropic-ratelimit-*`` (``anthropic-fast-*`` for a fast tier's input and output
        tokens); each protocol keeps its own (``Protocol.limit_headers``).

        Synchronous, for buckets kept in this process; a turn awaits ``check_async`` instead
        (``gateway.pipeline.ratelimit``), which works with any state backend.
        """
        plan = self._plan(principal, tier, tokens, input_tokens, output_tokens)
        if plan is None:
            return {}
        wanted, wants = plan
        takes = (self.state.take_all(wants, self.clock()) if self.state is not None else
                 take_in_memory(self._local, wants, self.clock()))
        return self._verdict(tier, wanted, takes, fast)

    async def check_async(self, principal: Principal | None, tier: str, tokens: int,
                          input_tokens: int | None = None, output_tokens: int = 0,
                          fast: bool = False) -> dict[str, str]:
        """``check`` with the take awaited (Redis: one bounded round trip, off the loop);
        raises ``StateUnavailable`` (503) when the state store does not answer."""
        plan = self._plan(principal, tier, tokens, input_tokens, output_tokens)
        if plan is None:
            return {}
        wanted, wants = plan
        takes = (await self.state.take_all_async(wants, self.clock()) if self.state is not None
                 else take_in_memory(self._local, wants, self.clock()))
        return self._verdict(tier, wanted, takes, fast)

    def _plan(self, principal: Principal | None, tier: str, tokens: int,
              input_tokens: int | None, output_tokens: int,
              ) -> tuple[list[tuple[str, int, int]], list[Want]] | None:
        """What a request takes from which bucket (None: nothing to take); 403 for a tier the
        key may not use."""
        if principal is None:
            return None
        key = principal.key
        if key.tiers and tier not in key.tiers:
            raise self._reject(APIError(
                403,
                f"This API key may not use the {tier} tier (allowed: {', '.join(key.tiers)}).",
                code="tier_not_allowed",
            ), tier)
        limit = key.limits.get(tier)
        if limit is None:
            return None
        # the braces keep a key's buckets of a tier in one Redis Cluster slot (one script
        # takes from all of them); the key's id names them, never the key
        base = f"ratelimit|{{{principal.id}|{tier}}}|"
        wanted = [(kind, per, amount) for kind, per, amount in (
            ("requests", limit.requests_per_minute, 1),
            ("tokens", limit.tokens_per_minute, tokens),
            ("input-tokens", limit.input_tokens_per_minute,
             tokens if input_tokens is None else input_tokens),
            ("output-tokens", limit.output_tokens_per_minute, output_tokens),
        ) if per]
        # all or nothing, atomically: a refusal by one bucket spends nothing from the others,
        # and two concurrent requests never both spend the last of a bucket
        return wanted, [(base + kind, amount, per / 60.0, per) for kind, per, amount in wanted]

    def _verdict(self, tier: str, wanted: list[tuple[str, int, int]], takes: list[Take],
                 fast: bool) -> dict[str, str]:
        """The headers of a request the buckets took, or its 429."""
        got = {kind: t for (kind, _, _), t in zip(wanted, takes, strict=True)}
        if all(t.allowed for t in takes):
            return self._headers(wanted, got, fast)
        for kind, per, amount in wanted:
            if kind != "requests" and amount > per:
                raise self._reject(APIError(
                    429,
                    f"Request too large for {tier}: {amount} {kind.replace('-', ' ')}, limit "
                    f"{per} per minute.",
                    code="rate_limit_exceeded",
                    type="tokens",
                    headers=self._headers(wanted, got, fast),
                ), tier)
        wait = max(t.retry_after_s for t in takes)
        kind = next(kind for kind, t in got.items() if t.retry_after_s > 0)
        raise self._reject(APIError(
            429,
            f"Rate limit reached for {tier} on {kind.replace('-', ' ')} per minute. "
            f"Please try again in {_duration(wait)}.",
            code="rate_limit_exceeded",
            type="requests" if kind == "requests" else "tokens",
            headers={**self._headers(wanted, got, fast), **retry_headers(wait)},
        ), tier)

    @staticmethod
    def _headers(wanted: list[tuple[str, int, int]], takes: dict[str, Take],
                 fast: bool) -> dict[str, str]:
        h: dict[str, str] = {}
        now = time.time()
        for kind, per, _ in wanted:
            t = takes[kind]
            remaining = str(max(0, int(t.remaining)))
            if kind in ("requests", "tokens"):
                h[f"x-ratelimit-limit-{kind}"] = str(per)
                h[f"x-ratelimit-remaining-{kind}"] = remaining
                h[f"x-ratelimit-reset-{kind}"] = _duration(t.reset_s)
            # Anthropic: the reset is an RFC 3339 time; a fast mode has its own token limits
            prefix = ("anthropic-fast" if fast and kind in ("input-tokens", "output-tokens")
                      else "anthropic-ratelimit")
            h[f"{prefix}-{kind}-limit"] = str(per)
            h[f"{prefix}-{kind}-remaining"] = remaining
            h[f"{prefix}-{kind}-reset"] = _rfc3339(now + t.reset_s)
        return h


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
