"""Embeddings: deterministic vectors that behave like a model's, and what they cost and take.

**Vectors.** A RAG pipeline needs the same text to give the same vector and similar texts to
be closer than unrelated ones; it does not need meaning. So a text's vector is built from its
features: its lowercased words, word bigrams and the character trigrams of each word (the
"hashing trick"). Each feature's BLAKE2 hash picks ``PROBES`` coordinates of a fixed working
space and a sign for each; the feature adds a weight there (words count most, trigrams least,
so a typo moves a vector a little). The sum is normalised to unit length. Texts that share
words share coordinates, hence a higher cosine; unrelated texts are near-orthogonal. A
request's ``dimensions`` keeps the first N coordinates and normalises again, as OpenAI's
shortened (Matryoshka) embeddings do, so a shortened vector is a prefix of the full one,
rescaled. Pure Python, no clock, no I/O: the same text gives the same vector on any machine.

**Physics.** An embedding model only prefills: one forward pass over the input, no decode. A
pool runs steps of ``batch_tokens`` tokens (many requests packed together); a request's inputs
take ``ceil(tokens / batch_tokens)`` such steps, each timed by the roofline
(``Placement.step_seconds`` with prefill only, attention over sequences of ``seq_tokens``). A
token costs the pool's hardware time per token (``chips x hourly price x step / batch_tokens``);
its price is that cost times the reference tier's ratio of input price to its own prefill cost
(the margin the provider charges on prefill), as tier prices are derived from hardware cost.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from fastmode.backends.perf import Placement, prefill_attention_context

PROBES = 4  # coordinates each feature adds to
WEIGHTS = {"w": 1.0, "b": 0.7, "c": 0.35}  # word, word bigram, character trigram
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_FEATURES = 20_000  # features read per input (a long text: its first ~5,000 words)


def _features(text: str) -> list[tuple[str, float]]:
    words = _WORD.findall(text.lower())
    out: list[tuple[str, float]] = []
    for i, word in enumerate(words):
        out.append(("w:" + word, WEIGHTS["w"]))
        if i:
            out.append(("b:" + words[i - 1] + " " + word, WEIGHTS["b"]))
        padded = f"<{word}>"
        out.extend(("c:" + padded[j:j + 3], WEIGHTS["c"]) for j in range(len(padded) - 2))
        if len(out) >= MAX_FEATURES:
            break
    return out


@lru_cache(maxsize=1 << 16)
def _probes(feature: str, size: int) -> tuple[tuple[int, float], ...]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8 * PROBES).digest()
    out = []
    for k in range(PROBES):
        word = int.from_bytes(digest[8 * k:8 * k + 8], "little")
        out.append((word % size, 1.0 if (word >> 63) & 1 else -1.0))
    return tuple(out)


def embed(text: str, dimensions: int, tokens: Sequence[int] | None = None) -> list[float]:
    """The unit vector of ``text`` (or of a list of token ids) in ``dimensions`` coordinates;
    the first N of a longer vector, renormalised, for N below the model's size."""
    vec = [0.0] * dimensions
    feats = _features(text) if tokens is None else [
        (f"t:{t}", WEIGHTS["w"]) for t in tokens[:MAX_FEATURES]]
    if not feats:
        feats = [("empty", 1.0)]
    for feature, weight in feats:
        for index, sign in _probes(feature, dimensions):
            vec[index] += sign * weight
    return normalised(vec)


def shortened(vector: Sequence[float], dimensions: int) -> list[float]:
    """OpenAI's shortened embedding: the first ``dimensions`` coordinates, renormalised."""
    return normalised(list(vector[:dimensions]))


def normalised(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0:
        vec[0], norm = 1.0, 1.0
    return [x / norm for x in vec]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class EmbeddingPool:
    """An embedding model on its hardware, run at steps of ``batch_tokens`` packed tokens."""

    placement: Placement
    batch_tokens: int = 8192
    seq_tokens: int = 512  # the typical input the packed batch is made of (attention span)

    def step_seconds(self) -> float:
        seq = min(self.seq_tokens, self.batch_tokens)
        context = prefill_attention_context(seq, 0) * self.batch_tokens / seq
        return self.placement.step_seconds(0, 0.0, self.batch_tokens, context)

    def seconds(self, tokens: int) -> float:
        """Modeled time to embed ``tokens`` tokens: whole steps of the packed pool."""
        return max(1, math.ceil(tokens / self.batch_tokens)) * self.step_seconds()

    def cost_per_token(self) -> float:
        """USD of hardware time per embedded token."""
        hourly = self.placement.chips * self.placement.hardware.price_per_hour_usd
        return hourly / 3600.0 * self.step_seconds() / self.batch_tokens


def prefill_cost_per_token(placement: Placement, chunk: int = 8192, seq: int = 512) -> float:
    """USD of hardware time per prompt token of a chat deployment prefilling full chunks:
    what the reference tier's input price is a margin on."""
    return EmbeddingPool(placement, chunk, seq).cost_per_token()
