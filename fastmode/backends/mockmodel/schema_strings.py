"""Strings for the schema generator: ``format`` values, ``pattern`` matches, plausible words.

``pattern`` strings come from ``rstr``'s regex-to-string generator (the ``Xeger`` walk of
Python's own regex parser), with two adjustments that make its output fit a mock model:
repeats (``+``, ``*``, ``{2,}``) stay within a few characters of their minimum, so a
``^[a-z]+$`` field holds a word rather than 100 random letters, and negated character classes
draw from a sorted alphabet, so a seed gives the same string in every process (rstr draws from
a ``set``, whose order depends on the process's hash seed).

Free strings read as what their property name says: a ``name`` is a person's name, a
``description`` a sentence, a ``city`` a city (echoing the user's own place names when there
are some), an ``email`` an address.
"""

from __future__ import annotations

import itertools
import random
import re
import string
from typing import Any

import rstr

__all__ = [
    "FORMATS",
    "REPEAT_SPREAD",
    "formatted",
    "pattern_string",
    "plausible",
]

REPEAT_SPREAD = 6  # a repeat draws between its minimum and minimum + this
PATTERN_TRIES = 12  # rstr's walk ignores anchors and lookarounds: retry until re.search agrees

# what structured outputs document for ``format`` (OpenAI's list), plus the URI forms
FORMATS = frozenset({
    "date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid",
    "uri", "url", "uri-reference",
})  # fmt: skip


class _Xeger(rstr.Rstr):
    """rstr's generator with short repeats and a process-independent negated class."""

    def _handle_repeat(self, start_range: int, end_range: int, value: Any) -> str:
        times = self._random.randint(start_range, min(end_range, start_range + REPEAT_SPREAD))
        return "".join("".join(self._handle_state(i) for i in value) for _ in range(times))

    def _handle_in(self, value: Any) -> Any:
        candidates = [c for state in value for c in self._handle_state(state)]
        if candidates and candidates[0] is False:
            excluded = set(candidates[1:])
            candidates = sorted(c for c in _SAFE_PRINTABLE if c not in excluded)
        return self._random.choice(candidates)


# printable characters without the control whitespace (\t\n\r\x0b\x0c) rstr would also draw
_SAFE_PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " "


def pattern_string(
    pattern: str, rng: random.Random, lo: int = 0, hi: int | None = None
) -> str | None:
    """A string that ``re.search(pattern, s)`` finds, within [lo, hi] characters; None if a
    dozen tries found none (the caller falls back to a plain string)."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return None
    gen = _Xeger(rng)
    for _ in range(PATTERN_TRIES):
        try:
            candidate = gen.xeger(pattern)
        except (KeyError, IndexError, ValueError, re.error):
            return None  # a construct rstr does not walk (e.g. a conditional group)
        if compiled.search(candidate) and len(candidate) >= lo and (hi is None or
                                                                   len(candidate) <= hi):
            return candidate
    return None


_NAMES_FIRST = ("Alex", "Sam", "Maya", "Jordan", "Priya", "Kenji", "Lena", "Omar", "Sofia", "Noah")
_NAMES_LAST = ("Morgan", "Lee", "Patel", "Garcia", "Nakamura", "Okafor", "Schmidt", "Rossi")
_HOSTS = ("api.example.com", "cache-01.internal.example.net", "gateway.example.org")


def formatted(fmt: Any, rng: random.Random) -> str | None:
    """A value for a ``format`` (None: not one we generate)."""
    y, mo, d = rng.randint(2020, 2027), rng.randint(1, 12), rng.randint(1, 28)
    h, mi, s = rng.randint(0, 23), rng.choice((0, 15, 30, 45)), rng.randint(0, 59)
    if fmt == "date":
        return f"{y:04d}-{mo:02d}-{d:02d}"
    if fmt == "date-time":
        return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z"
    if fmt == "time":
        return f"{h:02d}:{mi:02d}:{s:02d}Z"
    if fmt == "duration":
        return rng.choice((f"PT{rng.randint(1, 59)}M", f"PT{rng.randint(1, 12)}H",
                           f"P{rng.randint(1, 30)}D", f"PT{rng.randint(1, 9)}H{mi}M"))
    if fmt == "email":
        first, last = rng.choice(_NAMES_FIRST), rng.choice(_NAMES_LAST)
        return f"{first.lower()}.{last.lower()}@example.com"
    if fmt == "hostname":
        return rng.choice(_HOSTS)
    if fmt == "ipv4":
        return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if fmt == "ipv6":
        return "2001:db8:" + ":".join(f"{rng.getrandbits(16):x}" for _ in range(6))
    if fmt in ("uri", "url", "uri-reference"):
        return f"https://example.com/{rng.choice(_GENERIC_WORDS)}"
    if fmt == "uuid":
        h32 = f"{rng.getrandbits(128):032x}"
        return f"{h32[:8]}-{h32[8:12]}-4{h32[13:16]}-a{h32[17:20]}-{h32[20:32]}"
    return None


# Plausible strings keyed by words that often appear in property names.
_HINTS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("city", "location", "place"), ("Paris", "Tokyo", "Lisbon", "Toronto", "Nairobi", "Austin")),
    (("country",), ("France", "Japan", "Portugal", "Canada", "Kenya", "Chile")),
    (("email",), ("alex@example.com", "sam.lee@example.org", "ops@example.net")),
    (("url", "uri", "link", "endpoint", "website"),
     ("https://example.com/docs", "https://api.example.org/v1")),
    (("path", "file", "filename"), ("src/main.py", "README.md", "config/settings.toml", "app.js")),
    (("dir", "folder", "directory"), ("src", "tests", "docs", "build")),
    (("lang", "language"), ("python", "rust", "typescript", "go")),
    (("unit", "units"), ("celsius", "metric", "seconds", "tokens")),
    (("command", "cmd", "shell"), ("ls -la", "pytest -q", "git status", "make build")),
    (("query", "search", "question", "q"), ("latency budget", "batch scheduler", "kv cache size")),
    (("title", "heading", "subject", "headline"),
     ("Scaling the batch scheduler", "Why fast mode costs more", "A tour of the KV cache")),
    (("label", "tag", "tags", "category", "keyword", "keywords"),
     ("latency", "batching", "caching", "pricing", "observability")),
    (("id", "key", "token", "ref", "sku", "code"), ("a1b2c3", "req_7f3e", "item-42", "k9x2")),
    (("color", "colour"), ("blue", "green", "orange")),
    (("currency",), ("USD", "EUR", "JPY")),
    (("model",), ("gpt-5", "claude-opus-4-6", "llama-3.1-70b")),
    (("status", "state"), ("open", "closed", "pending")),
    (("tz", "timezone"), ("UTC", "Europe/Paris", "America/New_York")),
    (("phone", "telephone", "mobile"), ("+1-555-0100", "+44 20 7946 0018", "+81 3-5555-0199")),
    (("street", "address"), ("12 Harbour Road", "221B Baker Street", "4 Rue de la Paix")),
    (("company", "organization", "organisation", "employer", "team"),
     ("Example Labs", "Acme Inference", "Northwind Systems")),
)
_PERSON_KEYS = frozenset({"name", "author", "owner", "user", "username", "person", "assignee",
                          "customer", "contact", "speaker", "reviewer", "manager"})
_SENTENCE_KEYS = frozenset({
    "description", "summary", "text", "content", "body", "message", "reason", "explanation",
    "answer", "comment", "note", "notes", "details", "rationale", "reasoning", "response",
    "step", "steps", "output", "result", "instructions", "bio", "abstract", "feedback",
    "point", "points", "detail", "highlight", "highlights", "takeaway", "takeaways",
    "setup", "punchline", "joke", "story", "quote", "definition", "sentence", "advice", "tip",
})
_GENERIC_WORDS = (
    "alpha", "batch", "cache", "decode", "engine", "request", "schedule", "stream", "token",
    "latency", "router", "replica", "summary", "update", "report", "sample",
)  # fmt: skip


def _words(key: str) -> set[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1_\2", key)
    return set(spaced.lower().replace("-", "_").split("_"))


def plausible(key: str, rng: random.Random, sentence: Any, places: list[str],
              phrase: str) -> str:
    """A free string for property ``key``; ``sentence()`` writes one sentence of prose,
    ``places`` and ``phrase`` come from the user's message (so arguments echo the request)."""
    words = _words(key)
    if places and words & _PLACE_KEYS:
        return rng.choice(places)
    if phrase and words & _QUERY_KEYS:
        return phrase
    if words & _PERSON_KEYS and not words & {"file", "tool", "function", "model", "host"}:
        return f"{rng.choice(_NAMES_FIRST)} {rng.choice(_NAMES_LAST)}"
    for hints, values in _HINTS:
        if words.intersection(hints):
            return rng.choice(values)
    if words & _SENTENCE_KEYS:
        return str(sentence())
    return rng.choice(_GENERIC_WORDS)


def padding(rng: random.Random) -> str:
    return rng.choice(_GENERIC_WORDS)


_PLACE_KEYS = frozenset({"city", "location", "place", "country", "destination", "origin"})
_QUERY_KEYS = frozenset({"query", "search", "question", "q", "prompt", "topic", "keywords"})
_STOP = frozenset(
    "a an and are about can could do does for from give how i in is it me my of on or please "
    "show tell that the this to what whats when where which who why will with would you "
    "your".split()
)


def proper_nouns(text: str) -> list[str]:
    """Capitalised words not at the start of a sentence: likely names of places or things."""
    found = re.findall(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]{2,})\b", text.strip())
    return list(dict.fromkeys(w for w in found if w.lower() not in _STOP))


_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")


def key_phrase(text: str) -> str:
    """The first few content words of the user's message, as a search query."""
    words = (m.group() for m in _WORD.finditer(text))  # lazily: only five are needed
    return " ".join(itertools.islice((w for w in words if w.lower() not in _STOP), 5))
