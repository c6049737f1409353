"""A ``Job``: one admitted request from submission to settlement.

It holds the mock model's whole reply (``Generation``), the engine's token stream that paces it,
and what settlement fills in (cost). Protocol encoders read it; nothing here knows a wire format.

Token bookkeeping is O(1) per streamed item, never per token: the stream says how many tokens
are new, counts those delivered and knows the modeled times ``time_info`` and settlement need
(``TokenStream``; ``UpstreamStream`` for a remote tier). The turn's hot loop reads the stream
itself (``gateway.pipeline.turn``); ``tokens()`` is the same as ``(start, count)`` pairs for the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastmode.backends.engine import Tier
from fastmode.backends.pricing import Prices
from fastmode.backends.scheduler import FINISHED
from fastmode.gateway import money
from fastmode.gateway.values.auth import Principal
from fastmode.gateway.values.caching import cache_write_premium
from fastmode.gateway.values.roles import Role
from fastmode.gateway.values.token_source import Reply, TokenSource


@dataclass(eq=False)
class Job:
    id: str
    model: str
    tier: Tier  # the tier that serves it (physics, prices)
    role: Role  # the role that serves it (what the encoders echo: never the tier's name)
    requested_tier: str  # the tier of the role asked for (differs after a downgrade)
    gen: Reply  # the mock model's Generation, or an upstream's LiveReply (gateway.remote)
    prompt_tokens: int
    cached_tokens: int
    stream: TokenSource  # the engine's TokenStream, or an upstream's stream
    created: int
    principal: Principal | None = None
    network_s: float = 0.0  # modeled network time before the first token (emulated RTT)
    settled: bool = False
    cost_usd: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)  # rate-limit headers from admission
    # what it pays per MTok: the model's price era for the role and tier that served it
    # (gateway.price_eras); None: the tier's own prices
    prices: Prices | None = None
    # prompt tokens written to the prefix cache, billed as such (Anthropic), and how many of
    # them to a long-lived (1 h) entry (gateway.caching)
    cache_write_tokens: int = 0
    cache_write_long_tokens: int = 0
    # for the ledger (gateway.ledger): how the request came and how it ended
    protocol: str = ""
    transport: str = "http"
    fault: str | None = None  # an injected fault kind (gateway.faults)
    ended: str = ""  # set at settlement: completed | cancelled | cut | failed | shutdown
    generated: int = 0  # set at settlement: tokens the engine produced before the end was seen
    billed_output: int = 0  # set at settlement: output tokens billed
    detail: str | None = None  # why it ended so, when not completed (e.g. reader_stalled)
    # vLLM's kv_transfer_params in the answer, when the request sent some (None: null)
    # (gateway.engines.kv_transfer)
    kv_transfer_asked: bool = False
    kv_transfer_params: dict[str, Any] | None = None

    @property
    def delivered(self) -> int:
        """Tokens handed to the client so far."""
        return self.stream.delivered

    @property
    def visible_at(self) -> float:
        """Modeled time of the first visible token, the one after the reasoning."""
        thought, stream = self.gen.reasoning_tokens, self.stream
        if stream.delivered <= thought:
            return -1.0
        at = stream.watched_at
        return at if at >= 0 else stream.token_at(thought)

    @property
    def downgraded(self) -> bool:
        return self.requested_tier != self.tier.name

    @property
    def finished(self) -> bool:
        return self.stream.seq.state == FINISHED

    def usage_cost(self, output_tokens: int | None = None) -> float:
        out = self.gen.output_tokens if output_tokens is None else output_tokens
        prices = self.tier.prices if self.prices is None else self.prices
        # the role's multiple is in every price: cache reads (cached_input) and, through the
        # input price, cache writes, as providers bill fast modes
        cost = prices.cost(self.prompt_tokens, self.cached_tokens, out)
        if self.cache_write_tokens:
            cost += cache_write_premium(prices.input, self.cache_write_tokens,
                                        self.cache_write_long_tokens)
        return money.cost(cost)

    def time_info(self) -> dict[str, float]:
        """Modeled times in seconds (Cerebras' ``time_info`` convention). ``reasoning_time``
        (fastmode's) is the part of ``completion_time`` spent thinking before the first visible
        token: the visible TTFT is ``queue_time + prompt_time + reasoning_time``. The times are
        those the client got: when the host served the engine late, its timeline slipped
        (docs/streaming.md) and ``host_lag_time`` (fastmode's) is how much of ``total_time`` the
        host added, ``completion_host_lag_time`` the part of it within ``completion_time``."""
        seq = self.stream.seq
        arrival = seq.arrival
        admitted = seq.admitted_at if seq.admitted_at >= 0 else arrival
        first = seq.first_token_at if seq.first_token_at >= 0 else admitted
        last = self.last_token_at if self.delivered else first
        queue = max(0.0, admitted - arrival)
        prompt = max(0.0, first - admitted)
        completion = max(0.0, last - first)
        # reasoning tokens come first: the first visible token is token number `thought`
        lag, completion_lag = self.stream.host_lag()
        thought = self.gen.reasoning_tokens
        visible = first
        if thought and self.delivered:
            visible = self.visible_at if self.visible_at >= 0 else last
        return {
            "queue_time": queue + self.network_s,
            "prompt_time": prompt,
            "reasoning_time": max(0.0, visible - first),  # first output to first visible token
            "completion_time": completion,
            "total_time": queue + prompt + completion + self.network_s,
            "network_time": self.network_s,  # emulated RTTs, included in queue_time
            "host_lag_time": lag,  # the host's, not the model's: included in the times above
            "completion_host_lag_time": completion_lag,  # ... in completion_time
        }

    @property
    def last_token_at(self) -> float:
        """Modeled time of the last token delivered (-1 before the first)."""
        return self.stream.last_at

    async def tokens(self) -> AsyncIterator[tuple[int, int]]:
        """Yield (index of the first new token, how many) as the engine produces them: with
        the tier's ``stream_interval`` N, a multiple of N (the events due) or the remainder."""
        stream = self.stream
        async for n in stream:
            yield stream.delivered - n, n
        self.streamed()

    def streamed(self) -> None:
        """The stream ended (whichever loop read it): a remote job takes its usage here."""

    def cancel(self) -> None:
        self.stream.cancel()
