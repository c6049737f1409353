"""``retry-after`` of a full pool is when its first slot frees, checked on
the virtual clock: the scheduler stepped at its own modeled times, no sleeping.

A full fast replica is asked when it will take one more request (``free_slot_at``); the answer,
as the gateway states it (``retry_headers``: whole milliseconds, rounded up), is then checked
against the timeline itself: replayed step by step, the replica refuses a request at every
moment before that time and takes one at it. In a burst (every request still waiting), while
prompts are being prefilled, and later with decoders of different lengths."""

from __future__ import annotations

import math

import pytest

from fastmode.backends.drivers import new_sequence
from fastmode.backends.engine import build
from fastmode.backends.free_slot import free_slot_at, free_slot_in
from fastmode.backends.scheduler import Scheduler
from fastmode.gateway.config import load_config
from fastmode.gateway.errors import retry_headers

SPEC = build(load_config().sim())


def fill(sched: Scheduler, prompt: int, outputs: tuple[int, ...], cached: int,
         now: float) -> None:
    """Requests arriving at ``now`` until the replica refuses one."""
    i = 0
    while sched.submit(new_sequence(prompt, outputs[i % len(outputs)], now, cached)):
        i += 1
    assert not sched.submit(new_sequence(10, 1, now))


def full_fast_replica(prompt: int, outputs: tuple[int, ...], cached: int = 0,
                      steps: int = 0) -> tuple[Scheduler, float]:
    """One replica of the built-in fast pool (16 slots, 12 held by the other tenants, 64
    waiting) filled at 0, then ``steps`` steps planned at their modeled times as the real-time
    replica plans them (a step when the previous one ends), then filled again: the replica and
    a moment inside its last step (0: before the first step, the burst)."""
    sched = SPEC.deployments["fast"].new_scheduler()
    fill(sched, prompt, outputs, cached, 0.0)
    clock, now = 0.0, 0.0
    for _ in range(steps):
        result = sched.step(clock)
        assert result is not None
        now, clock = result.start + (result.end - result.start) / 2, result.end
    fill(sched, prompt, outputs, cached, now)
    return sched, now


def takes_one(sched: Scheduler) -> bool:
    return sched.submit(new_sequence(100, 10, sched.busy_until))


def first_accepting_step(sched: Scheduler) -> float:
    """Step on from the state at hand; the planning time of the first step after which the
    replica takes a request (when its first running sequence's last step begins)."""
    for _ in range(100_000):
        start = sched.busy_until
        assert sched.step(start) is not None
        if takes_one(sched):
            return start
    raise AssertionError("no slot ever freed")


SCENARIOS = {  # prompt, outputs, cached, steps planned before the refusal
    "burst (nothing planned yet)": (3000, (800, 1200, 400, 2000), 0, 0),
    "first prompts being prefilled": (3000, (800, 1200, 400, 2000), 0, 1),
    "prefill half way": (3000, (800, 1200, 400, 2000), 0, 9),
    "all decoding": (3000, (800, 1200, 400, 2000), 0, 60),
    "after slots cycled": (1500, (50, 300, 120, 700), 0, 400),
    "cached prompts": (4000, (600, 900), 3500, 3),
    "one-token replies": (700, (1,), 0, 2),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_retrying_at_the_stated_time_finds_a_free_slot(scenario: str) -> None:
    prompt, outputs, cached, steps = SCENARIOS[scenario]
    sched, now = full_fast_replica(prompt, outputs, cached, steps)
    before = (sched.step_index, len(sched.waiting), [s.prefilled for s in sched.prefilling])
    wait = free_slot_in([sched], now)
    assert (sched.step_index, len(sched.waiting),
            [s.prefilled for s in sched.prefilling]) == before  # pure: nothing changed
    assert free_slot_at(sched, now) == pytest.approx(now + wait)
    stated = now + int(retry_headers(wait)["retry-after-ms"]) / 1000
    # the timeline itself: refused at every planning before the slot frees, taken at it
    twin, _ = full_fast_replica(prompt, outputs, cached, steps)
    frees = first_accepting_step(twin)
    assert frees <= stated  # never before a slot frees
    assert stated - frees < 0.0011  # and not later than the stated rounding (1 ms)
    # retrying at the stated time: every step that begins by then has been planned
    again, _ = full_fast_replica(prompt, outputs, cached, steps)
    while again.busy_until <= stated:
        again.step(again.busy_until)
    assert takes_one(again)


def test_an_idle_replica_has_a_slot_now() -> None:
    sched = SPEC.deployments["fast"].new_scheduler()
    assert free_slot_in([sched], 12.5) == 0.0
    assert free_slot_in([], 3.0) == 0.0


def test_the_pool_answers_with_its_earliest_replica() -> None:
    long_, _ = full_fast_replica(2000, (3000,), steps=20)
    short, now = full_fast_replica(2000, (300,), steps=20)
    assert free_slot_in([long_, short], now) == free_slot_in([short], now)
    assert free_slot_in([short], now) < free_slot_in([long_], now)


@pytest.mark.parametrize("seconds, ms, whole", [
    (1.346, "1346", "2"),  # once said retry-after: 1
    (0.0001, "1", "1"),
    (2.0, "2000", "2"),
    (2.0004, "2001", "3"),
    (0.3, "300", "1"),
    (59.9991, "60000", "60"),
])
def test_retry_after_and_its_milliseconds_agree_and_round_up(seconds: float, ms: str,
                                                             whole: str) -> None:
    h = retry_headers(seconds)
    assert (h["retry-after-ms"], h["retry-after"]) == (ms, whole)
    assert int(h["retry-after"]) == math.ceil(int(h["retry-after-ms"]) / 1000)
    assert int(h["retry-after-ms"]) / 1000 >= seconds
