"""Entities a prompt states, for a schema that asks to extract them.

"Extract the person: Ann is 31 and lives in Lyon" with a schema of ``name``, ``age``, ``city``
wants ``Ann``, ``31``, ``Lyon``: what the text says, not invented values. Read from the user's
text with a few plain rules, in order of appearance:

* **places**: a capitalised word or two after *in, at, from, to, near, visiting, lives in,
  based in, moved to*;
* **people**: capitalised words (one to three, e.g. "Ann", "Mary Jane Watson") that are not
  places, not a sentence's ordinary first word, and are followed by *is, was, has, lives,
  works, aged, (,)* or preceded by *named, called, Mr, Ms, Dr*, or open the sentence;
* **ages**: a number of 1 to 3 digits after *is, aged, age* or before *years old*;
* **emails**, and every other **number** (for integer fields such as ``year`` or ``count``).

``Entities.take`` gives them out per field, the first to the first field that asks, the next
to the next (a list of people gets each once), so arrays of objects follow the text too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CAP = r"[A-Z][a-zà-öø-ÿ'’-]+"
_PLACE = re.compile(
    rf"\b(?:in|at|from|to|near|visiting|into)[ \t]+((?:{_CAP})(?:[ \t]+{_CAP})?)")
_PERSON_BEFORE = re.compile(
    rf"\b(?:named|called|Mr\.?|Ms\.?|Mrs\.?|Dr\.?)[ \t]+((?:{_CAP})(?:[ \t]+{_CAP}){{0,2}})")
_PERSON_AFTER = re.compile(
    rf"\b((?:{_CAP})(?:[ \t]+{_CAP}){{0,2}})(?=\s+(?:is|was|has|lives|lived|works|worked|"
    rf"aged|turned|and\s+{_CAP}\s+(?:are|were))\b|\s*,|\s*\()")
_AGE = re.compile(r"\b(?:is|aged|age|turned)\s+(\d{1,3})\b|\b(\d{1,3})\s*(?:years?|yrs?)[ -]old\b"
                  rf"|\b{_CAP}\s*\((\d{{1,3}})\)")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*\d)")
_COMMON = frozenset(
    "The A An This That These Those It Its I We You He She They My Our Your His Her Their "
    "Extract Return Give Tell Please What Who Where When Which Why How Here There Today "
    "Yesterday Tomorrow Hello Hi Dear Respond Answer Output List Name Age City JSON Then "
    "And But Or If So Also Note Input Text User Person People".split())

PERSON_KEYS = frozenset({"name", "person", "author", "owner", "user", "customer", "contact",
                         "speaker", "assignee", "fullname", "full_name", "first_name",
                         "firstname", "who"})
PLACE_KEYS = frozenset({"city", "location", "place", "town", "country", "destination",
                        "origin", "hometown", "residence", "address"})
AGE_KEYS = frozenset({"age", "years", "age_years"})


@dataclass
class Entities:
    people: list[str] = field(default_factory=list)
    places: list[str] = field(default_factory=list)
    ages: list[int] = field(default_factory=list)
    emails: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    _given: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.people or self.places or self.ages or self.emails or self.numbers)

    def _next(self, kind: str, values: list[str] | list[int]) -> str | int | None:
        if not values:
            return None
        k = self._given.get(kind, 0)
        self._given[kind] = k + 1
        return values[k % len(values)]

    def string(self, key: str) -> str | None:
        """The text's value for a string field named ``key``, or None."""
        low = key.lower()
        if low in PERSON_KEYS or low.endswith(("_name", "name")) and low not in (
                "filename", "username", "hostname", "pathname", "tool_name", "model_name"):
            value = self._next("person", self.people)
        elif low in PLACE_KEYS:
            value = self._next("place", self.places)
        elif "email" in low:
            value = self._next("email", self.emails)
        else:
            return None
        return None if value is None else str(value)

    def integer(self, key: str, lo: int, hi: int) -> int | None:
        """The text's number for an integer field named ``key``, if it is within bounds."""
        low = key.lower()
        if low in AGE_KEYS:
            value = self._next("age", self.ages)
        elif low in ("year", "count", "number", "quantity", "total", "amount"):
            value = self._next("number", self.numbers)
        else:
            return None
        return value if isinstance(value, int) and lo <= value <= hi else None


def extract(text: str) -> Entities:
    if not text or not any(c.isupper() or c.isdigit() or c == "@" for c in text):
        return Entities()
    places = list(dict.fromkeys(m.group(1) for m in _PLACE.finditer(text)
                                if m.group(1).split()[0] not in _COMMON))
    people: list[str] = []
    for m in [*_PERSON_BEFORE.finditer(text), *_PERSON_AFTER.finditer(text)]:
        words = [w for w in m.group(1).split() if w not in _COMMON]
        name = " ".join(words)
        if name and name not in places and not any(name in p for p in places):
            people.append(name)
    people = sorted(dict.fromkeys(people), key=text.find)
    ages = [int(a or b or c) for a, b, c in _AGE.findall(text)]
    emails = _EMAIL.findall(text)
    numbers = [int(float(n)) for n in _NUMBER.findall(text) if "." not in n]
    return Entities(people, places, ages, emails, numbers)
