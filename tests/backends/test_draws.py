"""The writer's one-call draws give exactly ``random.Random``'s own: seeded replies stay put."""

from __future__ import annotations

import random

import pytest

from fastmode.backends.mockmodel.draws import chooser, integers
from fastmode.backends.mockmodel.wordbank import OBJECTS, SUBJECTS, VERBS


@pytest.mark.parametrize("seq", [SUBJECTS, VERBS, OBJECTS, (1,), tuple(range(64)),
                                 tuple(range(65)), "abc"])
def test_choice_draws_what_random_choice_draws(seq: object) -> None:
    for seed in range(50):
        ours, theirs = random.Random(seed), random.Random(seed)
        pick = chooser(ours)
        assert [pick(seq) for _ in range(200)] == [theirs.choice(seq) for _ in range(200)]  # type: ignore[arg-type]
        assert ours.random() == theirs.random()  # the stream is where Random's would be


@pytest.mark.parametrize(("a", "b"), [(2, 5), (3, 5), (2, 99), (20, 95), (0, 12), (7, 7),
                                      (-4, 4), (0, 2**40)])
def test_randint_draws_what_random_randint_draws(a: int, b: int) -> None:
    for seed in range(50):
        ours, theirs = random.Random(seed), random.Random(seed)
        draw = integers(ours)
        assert [draw(a, b) for _ in range(200)] == [theirs.randint(a, b) for _ in range(200)]
        assert ours.random() == theirs.random()


def test_randrange_is_randint_to_one_below() -> None:
    ours, theirs = random.Random(9), random.Random(9)
    draw = integers(ours)
    assert [draw(0, 12) for _ in range(500)] == [theirs.randrange(13) for _ in range(500)]


def test_bad_arguments_fail_as_random_does() -> None:
    with pytest.raises(IndexError):
        chooser(random.Random(1))([])
    with pytest.raises(ValueError):
        integers(random.Random(1))(5, 2)


def test_a_subclass_keeps_its_own_methods() -> None:
    rng = random.SystemRandom()
    assert chooser(rng) == rng.choice
    assert integers(rng) == rng.randint
