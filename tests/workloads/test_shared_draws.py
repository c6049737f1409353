"""One workload, two users of it: the simulator and the bench must draw the very same requests.

``fastmode bench --compare-sim`` sends a workload to a server and runs ``fastmode simulate`` on
the same flags; the comparison only means something if, for one seed, both sides see the same
requests at the same offsets. Both draw through ``workload.ShapeSampler``; these tests hold
the two sides to it end to end (bench flags -> simulate's command line -> simulated arrivals).
"""

from __future__ import annotations

import itertools
import random

import pytest

from fastmode.backends.engine import EngineSpec, build
from fastmode.backends.simstats import Collector
from fastmode.backends.simulate import Workload, _Arrivals, _open_loop
from fastmode.cli import build_parser
from fastmode.cli.simulate import build_workload
from fastmode.clients.simcompare import simulate_args
from fastmode.clients.workload import FlagWorkload, Sampler
from fastmode.gateway.config import load_config
from fastmode.workload import LengthDist, ShapeSampler, open_loop_times, user_rng

MIX = {"standard": 0.7, "fast": 0.2, "spark": 0.1}


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    return build(load_config().sim())


def simulated_arrivals(spec: EngineSpec, wl: Workload) -> list[tuple[float, str, int, int]]:
    """The open-loop arrivals ``simulate`` would feed its driver, in order."""
    col = Collector(spec)
    return [
        (a.time, a.tag.tier, a.prompt_tokens, a.output_tokens)
        for a in _open_loop(wl, _Arrivals(wl, spec), col)
    ]


def bench_requests(
    fwl: FlagWorkload, rate: float, arrivals: str, n: int
) -> list[tuple[float, str, int, int, bool]]:
    """The first ``n`` (offset, tier, prompt, max_tokens, with tools) the bench would send."""
    timed = Sampler(fwl).timed(rate, arrivals)
    return [
        (t, r.tier, r.prompt_tokens or 0, r.max_tokens, r.tools is not None)
        for t, r in itertools.islice(timed, n)
    ]


@pytest.mark.parametrize("arrivals", ["poisson", "constant"])
@pytest.mark.parametrize(
    "prompt,output",
    [(("fixed", 2000), ("fixed", 500)), (("lognormal", 1500), ("uniform", 300))],
)
@pytest.mark.parametrize("tools_share", [0.0, 0.4])
def test_bench_and_simulate_draw_the_same_open_loop_requests(
    spec: EngineSpec, arrivals: str, prompt: tuple[str, int], output: tuple[str, int],
    tools_share: float,
) -> None:
    fwl = FlagWorkload(MIX, LengthDist(*prompt), LengthDist(*output), tools_share, seed=11)
    # the bench's --compare-sim command line, parsed by the simulate command itself
    argv = simulate_args(fwl, rate=8.0, concurrency=None, duration=30.0, requests=None,
                         arrivals=arrivals)
    wl = build_workload(build_parser().parse_args(argv), spec)
    sim = simulated_arrivals(spec, wl)
    assert len(sim) > 100
    bench = bench_requests(fwl, 8.0, arrivals, len(sim))
    # the bench never sends a prompt shorter than its chat framing; these lengths never are
    assert all(p > 8 for _, _, p, _ in sim)
    tooled = [with_tools for *_, with_tools in bench]
    assert any(tooled) == (tools_share > 0)
    # a request with tools asks for at least 256 tokens (room for its JSON), from its own coin
    expected = [(t, tier, p, max(o, 256) if tools else o, tools)
                for (t, tier, p, o), tools in zip(sim, tooled, strict=True)]
    assert bench == expected
    assert {tier for _, tier, _, _ in sim} == set(MIX)


def test_one_sampler_same_sequence_whichever_side_holds_it() -> None:
    """The shared sampler's draws depend on the seed only, not on who asks or how."""
    prompt, output = LengthDist("lognormal", 900), LengthDist("uniform", 120)
    by_hand = []
    rng = random.Random(5)
    shapes = ShapeSampler(MIX, prompt, output)
    for t in itertools.islice(open_loop_times(3.0, "poisson", rng), 50):
        by_hand.append((t, shapes.draw(rng)))
    timed = list(itertools.islice(ShapeSampler(MIX, prompt, output).timed(3.0, "poisson",
                                                                        random.Random(5)), 50))
    assert timed == by_hand
    # the bench's sampler, with tools on half its requests (drawn from a stream of its own)
    client = Sampler(FlagWorkload(MIX, prompt, output, tools_share=0.5, seed=5))
    sent = list(itertools.islice(client.timed(3.0, "poisson"), 50))
    assert any(r.tools for _, r in sent) and not all(r.tools for _, r in sent)
    assert [(t, r.tier, r.prompt_tokens) for t, r in sent] == [
        (t, s.tier, max(8, s.prompt_tokens)) for t, s in by_hand
    ]
    for (_, r), (_, s) in zip(sent, by_hand, strict=True):  # tool calls get room for JSON
        assert r.max_tokens == (max(s.output_tokens, 256) if r.tools else s.output_tokens)


def test_closed_loop_users_draw_their_own_streams(spec: EngineSpec) -> None:
    """User u's k-th simulated request is the k-th draw from ``user_rng(seed, u)``."""
    from fastmode.backends.drivers import VirtualDriver
    from fastmode.backends.simulate import _ClosedLoop

    wl = Workload(MIX, LengthDist("uniform", 800), LengthDist("uniform", 60),
                  concurrency=4, duration=5.0, seed=9)
    arrivals = _Arrivals(wl, spec)
    driver = VirtualDriver(spec.deployments)
    pushed: list = []
    driver.push = pushed.append  # type: ignore[method-assign]
    loop = _ClosedLoop(wl, arrivals, Collector(spec), driver)
    loop.start()
    assert [a.tag.user for a in pushed] == [0, 1, 2, 3]
    shapes = ShapeSampler(MIX, wl.prompt, wl.output)
    for a in pushed:
        first = shapes.draw(user_rng(9, a.tag.user))
        assert (a.tag.tier, a.prompt_tokens, a.output_tokens) == (
            first.tier, first.prompt_tokens, first.output_tokens)
