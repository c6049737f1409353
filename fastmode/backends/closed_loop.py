"""A closed-loop serving benchmark stepped on one replica's scheduler, in virtual time.

``serving_steady_state`` (``backends.perf_serving``) is the closed form of a closed loop: the
users that fit the KV cache run, the others wait for a slot (Little's law), at the mean
context. ``stepped_closed_loop`` runs the same benchmark on the continuous-batching scheduler
(``backends.scheduler``: KV paged as replies grow, the newest request preempted and
recomputed when blocks run out, strict FCFS admission), the way a serving benchmark drives an
engine: ``users`` users each send ``rounds`` requests one after the other, all starting at
once, the lengths drawn uniformly on [``ratio`` x L, L] (vLLM's ``benchmark_serving`` random
dataset with ``--random-range-ratio``). No clock: the figures are the scheduler's own step
times, so the two can be compared on any placement, the held-out runs' included
(``python bench/heldout.py --stepped``).

``recv_interval``: the scheduler takes new requests every N steps (SGLang's
``--scheduler-recv-interval``): a request that arrives waits for the next step whose index is a
multiple of N.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from fastmode.backends.background import Background
from fastmode.backends.perf import Placement
from fastmode.backends.perf_serving import first_token_overhead_s
from fastmode.backends.profiles import ProfileError
from fastmode.backends.scheduler import Limits, Scheduler, Sequence, StepResult


@dataclass(frozen=True)
class LoopFigures:
    """What a benchmark of the stepped loop reports (seconds, tokens/s)."""

    ttft_mean_s: float  # every request's
    ttft_median_s: float
    steady_ttft_mean_s: float  # requests sent after the start (not the first, simultaneous round)
    tpot_s: float  # mean time per output token after the first
    output_tokens_per_s: float  # all output tokens over the run's time
    preemptions: int
    requests: int


@dataclass(frozen=True)
class LoopSpec:
    """The benchmark's conditions besides the placement."""

    users: int
    prompt_tokens: int  # L of the prompt lengths' range
    output_tokens: int  # L of the output lengths' range
    ratio: float = 1.0  # lengths uniform on [ratio x L, L]
    rounds: int = 10  # requests per user
    max_batch: int = 256
    max_batched_tokens: int = 8192
    recv_interval: int = 1
    request_overhead: bool = False  # the profile's first-token overhead in TTFT (predict's)
    seed: int = 0


class _Loop:
    def __init__(self, p: Placement, spec: LoopSpec) -> None:
        self.p, self.spec = p, spec
        self.rng = random.Random(spec.seed)
        self.sched = Scheduler(p, Limits(
            max_batch=spec.max_batch, max_batched_tokens=spec.max_batched_tokens,
            max_waiting=spec.users * spec.rounds, prefix_caching=False), Background())
        self.left = [spec.rounds] * spec.users
        self.pending: list[Sequence] = []  # sent, not yet taken by the scheduler
        self.done: list[Sequence] = []
        self.ids = 0

    def draw(self, tokens: int) -> int:
        lo = max(1, math.ceil(self.spec.ratio * tokens))
        return self.rng.randint(lo, tokens) if lo < tokens else tokens

    def send(self, user: int, now: float) -> None:
        seq = Sequence(self.ids, self.draw(self.spec.prompt_tokens),
                       self.draw(self.spec.output_tokens), now, tag=user)
        self.ids += 1
        self.pending.append(seq)

    def poll(self) -> None:
        """Hand the pending requests to the scheduler if its next step polls (an idle one
        polls at once)."""
        s = self.sched
        if self.pending and (not s.has_work
                             or (s.step_index + 1) % self.spec.recv_interval == 0):
            for seq in self.pending:
                if not self.sched.submit(seq):
                    raise ProfileError("stepped loop: the waiting queue refused a request")
            self.pending.clear()

    def finish(self, result: StepResult) -> None:
        for seq in result.finished:
            self.done.append(seq)
            user = seq.tag
            self.left[user] -= 1
            if self.left[user] > 0:
                self.send(user, result.end)

    def run(self) -> float:
        s, now = self.sched, 0.0
        for u in range(self.spec.users):
            self.send(u, 0.0)
        while True:
            self.poll()
            result: StepResult | None
            if not self.pending and s.steady():
                result, _, _ = s.run_steady(now, math.inf)
            else:
                result = s.step(now)
                if result is None:
                    return now  # nothing runs and nothing is pending: every user is done
            now = result.end
            self.finish(result)


def stepped_closed_loop(p: Placement, spec: LoopSpec) -> LoopFigures:
    """Run the benchmark ``spec`` on ``p``'s scheduler; its figures (see the module doc)."""
    if spec.users < 1 or spec.rounds < 1 or spec.recv_interval < 1:
        raise ProfileError("stepped loop: users, rounds and recv_interval must be >= 1")
    if not 0 < spec.ratio <= 1:
        raise ProfileError("stepped loop: ratio must be in (0, 1]")
    loop = _Loop(p, spec)
    if not loop.sched.fits_ever(Sequence(-1, spec.prompt_tokens, spec.output_tokens, 0.0)):
        raise ProfileError("stepped loop: one sequence needs more KV than the replica holds")
    end = loop.run()
    done = loop.done
    ttft = [q.first_token_at - q.arrival
            + (first_token_overhead_s(p, q.prompt_tokens) if spec.request_overhead else 0.0)
            for q in done]
    steady = [t for t, q in zip(ttft, done, strict=True) if q.arrival > 0] or ttft
    tpot = [(q.finished_at - q.first_token_at) / (q.output_tokens - 1)
            for q in done if q.output_tokens > 1]
    return LoopFigures(
        ttft_mean_s=statistics.fmean(ttft), ttft_median_s=statistics.median(ttft),
        steady_ttft_mean_s=statistics.fmean(steady),
        tpot_s=statistics.fmean(tpot) if tpot else 0.0,
        output_tokens_per_s=sum(q.output_tokens for q in done) / end,
        preemptions=loop.sched.preemptions, requests=len(done))


__all__ = ["LoopFigures", "LoopSpec", "stepped_closed_loop"]
