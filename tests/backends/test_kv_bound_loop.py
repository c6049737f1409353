"""A closed loop whose users' sequences do not all fit the KV cache: the closed form
(``perf_serving.serving_steady_state``: the users that fit run, the others wait for a slot)
against the same benchmark stepped on the continuous-batching scheduler in virtual time
(``backends.closed_loop``: paging as replies grow, the newest request preempted and
recomputed, FCFS admission), and an engine that takes new requests every N steps (SGLang's
``--scheduler-recv-interval``) in both.

The placement is the held-out KV-bound one: DeepSeek-R1 NVFP4 on 4 x B200 under SGLang's
memory rule (a bf16 KV cache of ~985K tokens), 8K-token prompts and 1K-token replies, lengths
uniform on [0.8 L, L] as the sweep draws them. The closed form models the loop's steady state,
so it is compared with the requests sent after the start (the first round of a benchmark
starts every user at once).
"""

from __future__ import annotations

import pytest

from fastmode.backends.closed_loop import LoopSpec, stepped_closed_loop
from fastmode.backends.perf import Placement
from fastmode.backends.perf_serving import Workload, recv_lag_steps, serving_steady_state
from fastmode.backends.predict import PlacementOptions, build_placement
from fastmode.backends.profiles import Catalog, ProfileError
from fastmode.cli import main

ISL, OSL, RATIO = 8192, 1024, 0.8
TTFT_TOLERANCE = 0.25  # the closed form's mean TTFT against the stepped loop's
TPOT_TOLERANCE = 0.05
TPUT_TOLERANCE = 0.08


def placement(kv_precision: str | None = None) -> Placement:
    p, _ = build_placement(Catalog.builtin(), "deepseek-v3-nvfp4", "b200", 4, "fp4", 8192,
                           kv_precision=kv_precision,
                           options=PlacementOptions(engine="sglang", expert_parallel=4))
    return p


def mean(tokens: int) -> int:
    return round((1 + RATIO) / 2 * tokens)


def closed_form(p: Placement, users: int, isl: int = ISL, osl: int = OSL,
                recv_interval: int = 1) -> Workload:
    return serving_steady_state(p, users, mean(isl), mean(osl), 256, 8192,
                                lag_steps=recv_lag_steps(recv_interval), request_overhead=True)


def stepped(p: Placement, users: int, isl: int = ISL, osl: int = OSL, recv_interval: int = 1,
            seed: int = 0) -> tuple[float, float, float]:
    """(steady mean TTFT, TPOT, output tokens/s) of the stepped benchmark."""
    f = stepped_closed_loop(p, LoopSpec(users, isl, osl, ratio=RATIO,
                                        recv_interval=recv_interval, request_overhead=True,
                                        seed=seed))
    return f.steady_ttft_mean_s, f.tpot_s, f.output_tokens_per_s


@pytest.mark.parametrize("users", [128, 160])
def test_a_kv_bound_loop_waits_for_slots_as_the_stepped_scheduler_does(users: int) -> None:
    p = placement()
    w = closed_form(p, users)
    assert w.running < users and w.queued == users - w.running  # KV-bound: some users wait
    # a few users waiting for one of many slots: a long-tailed wait, its mean over three draws
    runs = [stepped(p, users, seed=seed) for seed in range(3)]
    ttft, tpot, tput = (sum(r[i] for r in runs) / len(runs) for i in range(3))
    assert w.ttft_s == pytest.approx(ttft, rel=TTFT_TOLERANCE)
    assert w.itl_s == pytest.approx(tpot, rel=TPOT_TOLERANCE)
    assert w.output_tokens_per_s == pytest.approx(tput, rel=TPUT_TOLERANCE)


def test_waiting_for_a_slot_is_longer_than_the_first_token_of_a_loop_that_fits() -> None:
    users = 128
    bound, roomy = placement(), placement("fp8")  # an fp8 cache holds every user's sequence
    assert closed_form(roomy, users).running == users
    kv_bound = closed_form(bound, users).ttft_s
    fits = closed_form(roomy, users).ttft_s
    assert kv_bound > 2 * fits
    assert stepped(bound, users)[0] > 2 * stepped(roomy, users)[0]  # the scheduler agrees


def test_more_users_than_slots_wait_longer_in_both() -> None:
    p = placement()
    cf = [closed_form(p, u).ttft_s for u in (128, 144, 160)]
    st = [stepped(p, u)[0] for u in (128, 144, 160)]
    assert cf == sorted(cf) and st == sorted(st)


@pytest.mark.parametrize("isl,osl,users", [(1024, 1024, 64), (8192, 1024, 128)])
def test_a_scheduler_that_polls_every_n_steps_delays_the_first_token_in_both(
        isl: int, osl: int, users: int) -> None:
    p = placement()
    polled = closed_form(p, users, isl, osl, recv_interval=30)
    ttft, _, _ = stepped(p, users, isl, osl, recv_interval=30)
    assert polled.ttft_s == pytest.approx(ttft, rel=TTFT_TOLERANCE)
    every_step = closed_form(p, users, isl, osl)
    # (N - 1) / 2 = 14.5 more steps of the loop on average
    assert polled.ttft_s - every_step.ttft_s == pytest.approx(14.5 * polled.itl_s, rel=0.1)
    assert ttft > stepped(p, users, isl, osl)[0] + 10 * polled.itl_s


def test_bad_loops_are_refused() -> None:
    p = placement()
    with pytest.raises(ProfileError):
        stepped_closed_loop(p, LoopSpec(0, ISL, OSL))
    with pytest.raises(ProfileError):
        stepped_closed_loop(p, LoopSpec(4, ISL, OSL, recv_interval=0))
    with pytest.raises(ProfileError):
        stepped_closed_loop(p, LoopSpec(4, 10**7, OSL))  # one sequence exceeds the cache
    with pytest.raises(ProfileError):
        recv_lag_steps(0)


PREDICT = ["predict", "--model", "deepseek-v3-nvfp4", "--precision", "fp4", "--hardware",
           "b200", "--chips", "4", "--engine", "sglang", "--expert-parallel", "4"]


@pytest.mark.parametrize("extra,message", [
    (["--scheduler-recv-interval", "0"], "scheduler-recv-interval: must be >= 1"),
    (["--scheduler-recv-interval", "10", "--prefill-chips", "4"], "not modelled"),
])
def test_predict_refuses_a_bad_recv_interval_in_one_line(capsys: pytest.CaptureFixture[str],
                                                        extra: list[str], message: str) -> None:
    assert main([*PREDICT, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
