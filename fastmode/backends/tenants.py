"""The other tenants of a pool as demand: arrivals and lengths, not a fixed occupancy.

A deployment is shared with traffic we do not see. Modelling each of their requests as a
``Sequence`` would cost ten times our own traffic in events (hundreds of requests per second);
a constant occupancy never reacts to load. Between the two, each replica carries a
``TenantLoad``: the tenants' requests as cohorts (a count, and the tokens each still has to
produce), advanced in ticks of ``tick_s``:

- arrivals: Poisson per tick, at the pool's rate divided among its active replicas, so a pool
  that loses a replica concentrates its tenants on the others;
- progress: a tenant sequence produces one token per step, so a tick is ``tick_s / step``
  tokens at the step time the replica has then: a fuller batch is slower for them too;
- admission: free batch slots (and KV) go to waiting tenants and our waiting requests in
  priority order and, within one priority, in proportion to how many of each wait (FCFS between
  two interleaved queues); a full waiting queue refuses them (counted);
- the scheduler sees them as its ``Background``: the mean number of tenant sequences over the
  coming tick, their mean context, and their prompt tokens per step (the pool's tenant prompt
  rate per replica; it changes when the pool's replica count does).

A tick costs a few microseconds whatever the tenants' rate, at most once per ``tick_s`` per
replica, and lazily: ``advance(now)`` runs before a replica plans a step, so an idle replica costs
nothing until work (or a dashboard reader) comes. Both clocks call it at the same step starts,
so the virtual and real-time timelines stay the same.

``equilibrium`` is the mean of that process (Little's law at the operating step): what
``fastmode predict`` and the derived prices use, and the state each replica starts in.
"""

from __future__ import annotations

import math
import operator
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from fastmode.backends.background import Background
from fastmode.backends.perf import Placement
from fastmode.backends.pricing import operating_step_seconds
from fastmode.backends.scheduler import Limits, Scheduler


@dataclass(frozen=True)
class TenantInput:
    """A tier's tenants as configured: a rate, or the occupancy the rate is derived from."""

    tier: str
    prompt_tokens: int
    output_tokens: int
    rate: float | None = None  # requests/s across the pool
    occupancy: float | None = None  # mean share of a replica's batch slots
    priority: int = 0
    cached_tokens: int = 0  # of the prompt, found in the prefix cache: not prefilled

    @property
    def fresh_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True)
class TenantClass:
    """One tier's tenants on a pool, resolved: requests/s across the pool and their lengths."""

    tier: str
    rate: float
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    cached_tokens: int = 0  # of the prompt, found in the prefix cache: not prefilled

    @property
    def context_tokens(self) -> float:
        """Mean context of one of their decoding sequences: the prompt and half the reply."""
        return self.prompt_tokens + self.output_tokens / 2


@dataclass(frozen=True)
class TenantDemand:
    """All tenant classes of one pool and the equilibrium they reach on ``replicas`` replicas."""

    classes: tuple[TenantClass, ...]
    replicas: int
    step_s: float  # the decode step at equilibrium: a tenant reply takes output x step_s
    background: Background  # the mean load one replica carries at equilibrium
    tick_s: float = 2.0

    def prefill_per_step(self, replicas: int) -> int:
        """Their prompt tokens riding along in every step when the pool has ``replicas``."""
        per = sum(c.rate * (c.prompt_tokens - c.cached_tokens) for c in self.classes)
        per /= max(1, replicas)
        return int(round(per * self.step_s))


def equilibrium(
    placement: Placement, limits: Limits, inputs: Sequence[TenantInput], replicas: int,
    tick_s: float = 2.0,
) -> TenantDemand:
    """The tenants' mean load per replica: seats = rate/replicas x output x step (Little), where
    the step is the one at that very batch (a fixed point), plus one sequence (ours).

    Raises ValueError (naming the tier) when the demand needs more batch slots than there are.
    """
    seats = [
        (i.occupancy or 0.0) * limits.max_batch if i.rate is None else 0.0 for i in inputs
    ]
    step = 0.0
    bg = Background()
    for _ in range(200):
        total = sum(seats)
        if total >= limits.max_batch - 1:
            worst = max(range(len(inputs)), key=lambda k: seats[k])
            raise ValueError(
                f"tiers.{inputs[worst].tier}.tenants: their demand needs {total:.0f} of the "
                f"{limits.max_batch} batch slots of each of {replicas} replicas: lower the rate "
                f"or the occupancy, or add replicas"
            )
        ctx = (
            sum(s * (i.prompt_tokens + i.output_tokens / 2) for s, i in zip(seats, inputs, strict=True))
            / total
            if total > 0
            else 0.0
        )
        prefill = sum(s * i.fresh_tokens / i.output_tokens for s, i in zip(seats, inputs, strict=True))
        bg = Background(int(round(total)), int(round(ctx)), int(round(prefill)))
        step = operating_step_seconds(placement, bg)
        new = [
            s if i.rate is None else i.rate / replicas * i.output_tokens * step
            for s, i in zip(seats, inputs, strict=True)
        ]
        if max((abs(a - b) for a, b in zip(new, seats, strict=True)), default=0.0) < 1e-6:
            break
        seats = new
    else:
        raise ValueError(f"tiers.{inputs[0].tier}.tenants: no steady state (overloaded pool)")
    classes = tuple(
        TenantClass(
            i.tier,
            i.rate if i.rate is not None else s * replicas / (i.output_tokens * step),
            i.prompt_tokens,
            i.output_tokens,
            i.priority,
            i.cached_tokens,
        )
        for s, i in zip(seats, inputs, strict=True)
    )
    return TenantDemand(classes, replicas, step, bg, tick_s)


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson draw: Knuth's product of uniforms for small means, the normal beyond."""
    if lam <= 0:
        return 0
    if lam < 30:
        limit = math.exp(-lam)
        k, p = 0, rng.random()
        while p > limit:
            k += 1
            p *= rng.random()
        return k
    return max(0, int(rng.gauss(lam, math.sqrt(lam)) + 0.5))


# per class: arrived, admitted, rejected, completed, prompt tokens (cached ones included), cached
# prompt tokens, output tokens, seconds waited for a slot
ARRIVED, ADMITTED, REJECTED, COMPLETED, PROMPT, CACHED, OUTPUT, WAIT = range(8)


class TenantLoad:
    """One replica's share of its pool's tenants (see the module doc).

    Running tenants are cohorts (admitted together) in one FIFO per class, each remembering
    the value of ``progress`` (tokens every tenant sequence produced since the start) at which
    it finishes; a tick adds its tokens to ``progress`` and retires the cohorts that reached
    theirs, so a tick costs what finishes in it, not what runs.
    """

    __slots__ = ("demand", "sched", "rng", "tick_s", "origin", "ticks", "next_tick", "rates",
                 "prefill", "running", "active", "progress", "queues", "queued", "stats",
                 "seat_s", "seats", "_levels", "_ctx", "_outputs")

    def __init__(
        self, demand: TenantDemand, scheduler: Scheduler, rng: random.Random, start: float,
        replicas: int, warm: bool = True,
    ) -> None:
        self.demand = demand
        self.sched = scheduler
        self.rng = rng
        self.tick_s = demand.tick_s
        self.origin = start
        self.ticks = 0
        self.next_tick = start + self.tick_s
        n = len(demand.classes)
        self.rates = [0.0] * n
        self.prefill = 0
        self.running: list[deque[list[float]]] = [deque() for _ in range(n)]  # [finish, count]
        self.active = 0  # tenant sequences running
        self.progress = 0.0  # tokens each running tenant sequence produced so far, cumulated
        self.queues: list[deque[list[float]]] = [deque() for _ in range(n)]  # [arrival, count]
        self.queued = 0
        self.stats = [[0.0] * 8 for _ in range(n)]
        self.seat_s = 0.0  # integral of tenant sequences in the batch over time
        self.seats = 0
        self._ctx = demand.background.context_tokens
        self._levels = sorted({c.priority for c in demand.classes}, reverse=True)
        self._outputs = [c.output_tokens for c in demand.classes]
        self.share(replicas)
        if warm:
            self._warm()
        self._publish(self.tick_s / demand.step_s if demand.step_s > 0 else math.inf)

    # -- the pool's side ------------------------------------------------------------------

    def share(self, replicas: int) -> None:
        """The pool now has ``replicas`` active replicas (0: this one is leaving it)."""
        k = max(1, replicas)
        self.rates = [c.rate / k if replicas > 0 else 0.0 for c in self.demand.classes]
        prefill = self.demand.prefill_per_step(k) if replicas > 0 else 0
        if prefill != self.prefill:
            self.prefill = prefill
            if self.seats:
                self._publish(self._tokens_per_tick())

    def hand_over(self, others: Sequence[TenantLoad]) -> None:
        """This replica leaves its pool: its tenants (running and waiting) move to ``others``,
        as a load balancer would re-route them; it keeps none. A running one that finds no free
        slot there is preempted: it queues again and starts over."""
        if not others:
            return
        m = len(others)
        for i, q in enumerate(self.running):
            for finish, count in q:
                left = finish - self.progress
                for j, o in enumerate(others):
                    part = int(count) // m + (1 if j < int(count) % m else 0)
                    room = o.sched.limits.max_batch - 1 - o.sched.running - o.seats
                    take = max(0, min(part, room))
                    if take:
                        o._insert(i, o.progress + left, take)
                        o.seats += take
                    if part > take:
                        o.queues[i].appendleft([o.next_tick - o.tick_s, part - take])
                        o.queued += part - take
            q.clear()
        for i, q in enumerate(self.queues):
            for when, count in q:
                for j, o in enumerate(others):
                    part = int(count) // m + (1 if j < int(count) % m else 0)
                    if part:
                        o.queues[i].append([when, part])
                        o.queued += part
            q.clear()
        self.active = 0
        self.queued = 0
        self.sched.queued_elsewhere = 0
        for o in others:
            o._publish(o._tokens_per_tick())
        self._publish(math.inf)

    def _insert(self, i: int, finish: float, count: int) -> None:
        """A running cohort moved in: keep the class's FIFO sorted by finish."""
        q = self.running[i]
        k = len(q)
        while k > 0 and q[k - 1][0] > finish:
            k -= 1
        q.insert(k, [finish, count])
        self.active += count

    @property
    def mean_seats(self) -> float:
        """Their mean seats at their rates now (Little's law at the operating step)."""
        return float(sum(map(operator.mul, self.rates, self._outputs))) * self.demand.step_s

    def _tokens_per_tick(self) -> float:
        return self.tick_s / max(self.sched.decode_estimate(), 1e-9)

    # -- the clock's side -----------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Run every tick due by ``now`` (the start of the replica's next step)."""
        while self.next_tick <= now:
            self._tick(self.next_tick)
            self.ticks += 1
            self.next_tick = self.origin + (self.ticks + 1) * self.tick_s

    def _tick(self, t: float) -> None:
        tick = self.tick_s
        dt = self.sched.decode_estimate()
        tok = tick / dt if dt > 0 else math.inf
        progress = self.progress = self.progress + tok
        if self.active:
            for i, q in enumerate(self.running):
                done = 0
                while q and q[0][0] <= progress:
                    done += int(q.popleft()[1])
                if done:
                    st = self.stats[i]
                    st[COMPLETED] += done
                    st[OUTPUT] += done * self._outputs[i]
                    self.active -= done
        rng = self.rng
        for i, lam in enumerate(self.rates):
            if lam > 0:
                n = poisson(rng, lam * tick)
                if n:  # they queue from this tick: admitted at it, they did not wait
                    self.queues[i].append([t, n])
                    self.queued += n
                    self.stats[i][ARRIVED] += n
        held = self._held(tok)
        if self.queued:
            self._admit(t, held, tok)
            held = self._held(tok)
        self.seat_s += self.seats * tick  # the seats they held over the tick that ended
        self._publish(tok, held)

    def _held(self, tok: float) -> float:
        """Mean tenant sequences over the coming tick: those finishing within it count for
        the part of it they run."""
        held = float(self.active)
        end = self.progress + tok
        for q in self.running:
            for finish, count in q:
                if finish >= end:
                    break
                held -= count * (end - finish) / tok
        return held

    def _admit(self, t: float, held: float, tok: float) -> None:
        """Free slots (and KV) to the waiting tenants, by priority, shared with our waiting
        requests of the same priority in proportion to how many of each wait; then refuse what
        overflows the waiting queue. Slots count as the mean over the coming tick: a tenant
        whose reply is shorter than the tick holds a slot for that part of it only, so one slot
        serves several of them in a tick (as it would, one after another)."""
        sched = self.sched
        limits = sched.limits
        free = limits.max_batch - sched.running - held
        if free > 0 and self._ctx > 0:
            user_kv = sched.kv_used_tokens - sched.background.kv_tokens
            free = min(free, (sched.kv_capacity - user_kv) / self._ctx - held)
        classes = self.demand.classes
        weights = [min(1.0, o / tok) for o in self._outputs]
        waiting = sched.waiting
        if len(classes) == 1 and not waiting:  # the common case: one class, nobody of ours
            if free >= weights[0]:
                self._admit_class(0, min(self.queued, int(free / weights[0])), t)
        elif free > 0:
            users: dict[int, int] = {}
            for s in waiting:
                users[s.priority] = users.get(s.priority, 0) + 1
            for level in sorted(set(self._levels) | set(users), reverse=True):
                if free <= 0:
                    break
                idx = [i for i, c in enumerate(classes) if c.priority == level]
                want = {i: sum(e[1] for e in self.queues[i]) for i in idx}
                need = sum(want[i] * weights[i] for i in idx)  # slots the waiting tenants hold
                theirs = users.get(level, 0)
                if need == 0:
                    free -= theirs
                    continue
                room = need if free >= need + theirs else free * need / (need + theirs)
                free -= room + theirs
                for i in idx:
                    n = int(room * (want[i] * weights[i] / need) / weights[i]
                            + self.rng.random())
                    self._admit_class(i, min(n, int(want[i])), t)
        over = self.queued - max(0, limits.max_waiting - len(waiting))
        if over > 0:
            for i in sorted(range(len(classes)), key=lambda k: classes[k].priority):
                q = self.queues[i]
                while over > 0 and q:
                    e = q[-1]
                    drop = min(over, int(e[1]))
                    e[1] -= drop
                    over -= drop
                    self.queued -= drop
                    self.stats[i][REJECTED] += drop
                    if e[1] <= 0:
                        q.pop()

    def _admit_class(self, i: int, n: int, t: float) -> None:
        if n <= 0:
            return
        q = self.queues[i]
        st = self.stats[i]
        c = self.demand.classes[i]
        left = n
        while left > 0 and q:
            e = q[0]
            k = min(left, int(e[1]))
            st[WAIT] += k * max(0.0, t - e[0])
            e[1] -= k
            left -= k
            if e[1] <= 0:
                q.popleft()
        got = n - left
        self.queued -= got
        st[ADMITTED] += got
        st[PROMPT] += got * c.prompt_tokens
        st[CACHED] += got * c.cached_tokens
        self.running[i].append([self.progress + c.output_tokens, got])
        self.active += got

    def _publish(self, tok: float, held: float | None = None) -> None:
        """Hand the scheduler the tenants' load over the coming tick."""
        if held is None:
            held = self._held(tok) if math.isfinite(tok) else float(self.active)
        seats = min(int(round(held)), self.sched.limits.max_batch - 1)
        self.seats = seats
        prefill = self.prefill if seats else 0
        bg = self.sched.background
        if bg.seqs != seats or bg.prefill_tokens_per_step != prefill:
            self.sched.set_background(Background(seats, self._ctx, prefill))
        self.sched.queued_elsewhere = self.queued

    def _warm(self) -> None:
        """Start at the stationary state: one cohort per tick of a reply's lifetime. A reply
        shorter than a tick lives within the tick it is admitted at, and the scheduler sees
        the tick's mean (``_held``): the replica starts as at a tick, with that tick's cohort
        (else it would start empty for a whole tick most of the time)."""
        tok = self.tick_s / self.demand.step_s if self.demand.step_s > 0 else math.inf
        if not math.isfinite(tok):
            return
        for i, (c, lam) in enumerate(zip(self.demand.classes, self.rates, strict=True)):
            left = tok * (1 - self.rng.random())  # where in its tick the oldest cohort is
            cohorts: list[tuple[float, int]] = []
            if c.output_tokens < tok:  # admitted at the start, as at a tick
                n = poisson(self.rng, lam * self.tick_s)
                if n:
                    cohorts.append((float(c.output_tokens), n))
                left = math.inf
            while left < c.output_tokens:
                n = poisson(self.rng, lam * self.tick_s)
                if n:
                    cohorts.append((left, n))
                left += tok
            for finish, count in cohorts:  # oldest first: the least left to produce
                self.running[i].append([finish, count])
                self.active += count

    @property
    def offered_tokens(self) -> float:
        """Output tokens of every tenant request that arrived here (the fleet's demand)."""
        return sum(
            st[ARRIVED] * c.output_tokens for st, c in zip(self.stats, self.demand.classes, strict=True)
        )

    def report(self) -> list[list[float]]:
        """Per class: arrived, admitted, rejected, completed, prompt, cached and output tokens,
        seconds waited."""
        return [list(s) for s in self.stats]
