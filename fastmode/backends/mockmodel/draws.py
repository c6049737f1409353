"""``random.Random``'s ``choice`` and ``randint`` as one call each: the same draws, fewer frames.

The writer (``prose.py``) makes about one ``choice`` per output token. ``Random.choice`` is
three Python calls deep (``choice``, ``_randbelow_with_getrandbits``, ``getrandbits``) and
``randint`` five (``randint``, ``randrange``, ``_index`` twice, ``_randbelow``); the functions here
run the same algorithm, ``k = n.bit_length()`` then ``getrandbits(k)`` until the value is below
``n``, in one frame, so every seeded reply stays what it was (``tests/backends/test_draws.py``
compares them with ``Random``'s own on many seeds). A ``random.Random`` subclass (one that draws
its bits some other way) gets its own methods back.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def chooser(rng: random.Random) -> Callable[[Sequence[T]], T]:
    """``rng.choice``, the same draws in one call."""
    if type(rng) is not random.Random:
        return rng.choice
    bits = rng.getrandbits

    def choice(seq: Sequence[T]) -> T:
        n = len(seq)
        if not n:
            raise IndexError("Cannot choose from an empty sequence")
        k = n.bit_length()
        r = bits(k)
        while r >= n:
            r = bits(k)
        return seq[r]

    return choice


def integers(rng: random.Random) -> Callable[[int, int], int]:
    """``rng.randint`` (``a <= N <= b``, ``a <= b``), the same draws in one call."""
    if type(rng) is not random.Random:
        return rng.randint
    bits = rng.getrandbits

    def randint(a: int, b: int) -> int:
        n = b - a + 1
        if n <= 0:
            return rng.randint(a, b)  # (raises as Random does)
        k = n.bit_length()
        r = bits(k)
        while r >= n:
            r = bits(k)
        return a + r

    return randint
