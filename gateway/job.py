"""A ``Job``: one admitted request from submission to settlement.

It holds the mock model's whole reply (``Generation``), the engine's token stream that paces it,
and what settlement fills in (cost). Protocol encoders read it; nothing here knows a wire format.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from backends.drivers import TokenStream
from backends.engine import Tier
from backends.mockmodel import Generation
from backends.scheduler import FINISHED

from .auth import Principal


@dataclass(eq=False)
class Job:
    id: str
    model: str
    tier: Tier
    requested_tier: str
    gen: Generation
    prompt_tokens: int
    cached_tokens: int
    stream: TokenStream
    created: int
    principal: Principal | None = None
    network_s: float = 0.0  # modeled network time before the first token (emulated RTT)
    delivered: int = 0  # tokens handed to the client so far
    token_times: list[float] = field(default_factory=list)
    settled: bool = False
    cost_usd: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)  # rate-limit headers from admission
    # for the ledger (gateway.ledger): how the request came and how it ended
    protocol: str = ""
    transport: str = "http"
    fault: str | None = None  # an injected fault kind (gateway.faults)
    ended: str = ""  # set at settlement: completed | cancelled | cut | failed | shutdown
    generated: int = 0  # set at settlement: tokens the engine produced before the end was seen
    billed_output: int = 0  # set at settlement: output tokens billed
    detail: str | None = None  # why it ended so, when not completed (e.g. reader_stalled)

    @property
    def downgraded(self) -> bool:
        return self.requested_tier != self.tier.name

    @property
    def finished(self) -> bool:
        return self.stream.seq.state == FINISHED

    def usage_cost(self, output_tokens: int | None = None) -> float:
        out = self.gen.output_tokens if output_tokens is None else output_tokens
        return self.tier.prices.cost(self.prompt_tokens, self.cached_tokens, out)

    def time_info(self) -> dict[str, float]:
        """Modeled times in seconds (Cerebras' ``time_info`` convention)."""
        seq = self.stream.seq
        arrival = seq.arrival
        admitted = seq.admitted_at if seq.admitted_at >= 0 else arrival
        first = seq.first_token_at if seq.first_token_at >= 0 else admitted
        last = self.token_times[-1] if self.token_times else first
        queue = max(0.0, admitted - arrival)
        prompt = max(0.0, first - admitted)
        completion = max(0.0, last - first)
        return {
            "queue_time": queue + self.network_s,
            "prompt_time": prompt,
            "completion_time": completion,
            "total_time": queue + prompt + completion + self.network_s,
            "network_time": self.network_s,  # emulated RTTs, included in queue_time
            "created": float(self.created),
        }

    async def tokens(self) -> AsyncIterator[tuple[int, list[float]]]:
        """Yield (index of the first new token, modeled times) as the engine produces them."""
        async for times in self.stream:
            start = self.delivered
            self.delivered += len(times)
            self.token_times.extend(times)
            yield start, times

    def cancel(self) -> None:
        self.stream.cancel()
