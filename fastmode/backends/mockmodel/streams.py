"""The mock model's randomness: one seed per request, one independent stream per decision.

The random stream is seeded from a BLAKE2 hash of the seed, the model, the messages, the tools
and the tool choice (never Python's salted ``hash()``). An unseeded request with
``temperature > 0`` is seeded from fresh OS randomness instead, so repeated requests differ like
a sampled model's would; with a seed or ``temperature == 0`` the reply is fully reproducible.
``max_tokens``, ``stop`` and ``ignore_eos`` are deliberately left out of the hash: as with greedy
decoding on a real model, a capped reply is a prefix of the uncapped one. So is the reasoning
effort: a seeded request gives the same visible reply at every effort, only the thinking before
it changes.

Independent decisions (length, text, tool choice, arguments, botching) draw from separate
streams derived from the same hash, so changing one knob does not reshuffle the others.
"""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any

from fastmode.backends.canonical_json import canonical
from fastmode.backends.mockmodel.request import GenerationRequest


def request_digest(req: GenerationRequest) -> bytes:
    """Stable hash of what determines the reply; for unseeded sampling, fresh entropy alone
    (a hash of the request mixed with it would be as random, and hashing costs the whole
    conversation's size: ~0.4 ms for a coding agent's 60 KB request)."""
    if req.seed is None and req.temperature > 0:
        return os.urandom(32)
    material: dict[str, Any] = {
        "seed": req.seed,
        "model": req.model,
        "messages": list(req.messages),
        "tools": [[t.name, t.description, t.parameters] for t in req.tools],
        "tool_choice": req.tool_choice,
    }
    if req.response_format is not None:  # left out otherwise: older seeds keep their replies
        fmt = req.response_format
        material["response_format"] = [fmt.kind, fmt.schema]
    return hashlib.blake2b(canonical(material), digest_size=32).digest()


class Streams:
    """Independent ``random.Random`` streams, one per decision, derived from one digest:
    given, or the request's (``request_digest``), made at the first stream asked for. A
    scripted text reply asks for none, and its request is never hashed."""

    def __init__(self, digest: bytes | GenerationRequest) -> None:
        self._digest = digest

    @property
    def digest(self) -> bytes:
        d = self._digest
        if not isinstance(d, bytes):
            d = self._digest = request_digest(d)
        return d

    def __call__(self, purpose: str) -> random.Random:
        return random.Random(self.digest + b"|" + purpose.encode())
