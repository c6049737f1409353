"""The shared workload definitions on their own: mixes, lengths, arrival processes."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from fastmode.workload import (
    LengthDist,
    ShapeSampler,
    TierPicker,
    WorkloadError,
    normalise_mix,
    open_loop_times,
    parse_mix,
    user_rng,
)


def test_parse_mix_keeps_shares_as_written_and_sums_repeats() -> None:
    assert parse_mix("standard=0.7, fast=0.2,spark=0.1,") == {
        "standard": 0.7, "fast": 0.2, "spark": 0.1}
    assert parse_mix("a=1,a=2,b=0") == {"a": 3.0, "b": 0.0}
    assert normalise_mix(parse_mix("a=1,a=2,b=0")) == {"a": 1.0}


@pytest.mark.parametrize("text,message", [
    ("standard", "mix: expected TIER=SHARE"),
    ("=1", "mix: expected TIER=SHARE"),
    ("a=x", "mix: share of 'a' is not a number"),
    ("a=-1", "mix: share of 'a' must be >= 0"),
    ("a=inf", "mix: share of 'a' must be >= 0"),
    ("a=nan", "mix: share of 'a' must be >= 0"),
    ("a=0", "mix: the shares add up to 0"),
    ("", "mix: the shares add up to 0"),
    ("turbo=1", "mix: unknown tier 'turbo'; allowed: fast, standard"),
])
def test_parse_mix_errors_name_the_flag(text: str, message: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_mix(text, known={"standard", "fast"} if "turbo" in text else None)
    assert str(exc.value).startswith(message)
    with pytest.raises(WorkloadError, match="^--mix: "):
        parse_mix(text, flag="--mix", known={"standard"} if "turbo" in text else None)


def test_tier_picker_follows_the_shares_and_skips_zeros() -> None:
    picker = TierPicker({"a": 3.0, "never": 0.0, "b": 1.0})
    assert picker.names == ["a", "b"]
    rng = random.Random(1)
    picks = [picker.names[picker.pick(rng)] for _ in range(20_000)]
    assert 0.73 < picks.count("a") / len(picks) < 0.77
    with pytest.raises(WorkloadError):
        TierPicker({"a": 0.0})


def test_lengths_have_the_requested_mean_and_fixed_draws_nothing() -> None:
    rng = random.Random(3)
    state = rng.getstate()
    assert LengthDist("fixed", 7).sample(rng) == 7 and rng.getstate() == state
    for kind in ("uniform", "lognormal"):
        draws = [LengthDist(kind, 400).sample(rng) for _ in range(40_000)]
        assert statistics.fmean(draws) == pytest.approx(400, rel=0.03)
        assert min(draws) >= 1
    with pytest.raises(WorkloadError, match="distribution: unknown 'zipf'"):
        LengthDist("zipf", 3)
    with pytest.raises(WorkloadError, match="mean length"):
        LengthDist("fixed", 0)


def test_open_loop_times() -> None:
    constant = list(itertools.islice(open_loop_times(4.0, "constant", random.Random(0)), 5))
    assert constant == [0.0, 0.25, 0.5, 0.75, 1.0]
    poisson = list(itertools.islice(open_loop_times(50.0, "poisson", random.Random(0)), 5000))
    assert poisson == sorted(poisson) and poisson[0] > 0
    assert len(poisson) / poisson[-1] == pytest.approx(50, rel=0.05)
    with pytest.raises(WorkloadError, match="arrivals: unknown 'bursty'"):
        next(open_loop_times(1.0, "bursty", random.Random(0)))


def test_draw_order_is_tier_prompt_output() -> None:
    """The contract with every user of the sampler: one uniform, then prompt, then output."""
    prompt, output = LengthDist("uniform", 100), LengthDist("lognormal", 50)
    shapes = ShapeSampler({"x": 1.0, "y": 1.0}, prompt, output)
    a, b = random.Random(8), random.Random(8)
    for _ in range(100):
        shape = shapes.draw(a)
        u = b.random()
        assert shape.tier == ("x" if u < 0.5 else "y")
        assert shape.prompt_tokens == prompt.sample(b)
        assert shape.output_tokens == output.sample(b)


def test_user_streams_are_independent_of_each_other() -> None:
    assert user_rng(1, 0).random() == user_rng(1, 0).random()
    assert user_rng(1, 0).random() != user_rng(1, 1).random()
    assert user_rng(1, 0).random() != user_rng(2, 0).random()
