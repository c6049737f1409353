"""How long a visible reply is: shaped by what the user asked for.

A model answers "hi" in a line, a yes/no question in a sentence or two, "explain X" in a few
paragraphs and "write a long story" in many; asked for "300 words" or "three sentences" it lands
near the number. ``classify`` reads the user's last message for those cues; ``reply_length``
draws a length around the configured median of its kind (``ReplyLengths``). ``max_tokens``
still caps the result, and ``ignore_eos`` still overrides all of it (exact-length load tests).
"""

from __future__ import annotations

import math
import random
import re

from fastmode.backends.mockmodel.behavior import ReplyLengths

_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "single": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twenty": 20, "fifty": 50,
    "hundred": 100,
}  # fmt: skip
# tokens per unit of an explicit length ("in 300 words", "three paragraphs")
_UNIT_TOKENS = {
    "word": 1.3, "token": 1.0, "sentence": 22.0, "line": 14.0, "paragraph": 110.0,
    "bullet": 16.0, "item": 16.0, "point": 16.0, "page": 650.0,
}  # fmt: skip
_EXPLICIT = re.compile(
    r"\b(\d{1,5}|" + "|".join(_NUMBER_WORDS) + r")[\s-]+"
    r"(?:short\s+|brief\s+|long\s+)?"
    r"(word|token|sentence|line|paragraph|bullet|item|point|page)s?\b",
    re.IGNORECASE,
)
_GREETING = re.compile(
    r"^\W*(hi|hello|hey|heya|yo|howdy|greetings|good (morning|afternoon|evening)|"
    r"thanks|thank you|thx|cheers|say (hi|hello))\b",
    re.IGNORECASE,
)
_LONG = re.compile(
    r"\b(a\s+long|long[- ]form|lengthy|detailed|in detail|in[- ]depth|essay|story|stories|"
    r"comprehensive|thorough(ly)?|elaborate|extensive(ly)?|step[- ]by[- ]step|tutorial|"
    r"article|white ?paper|everything about)\b",
    re.IGNORECASE,
)
_SHORT = re.compile(
    r"\b(brief(ly)?|short|concise(ly)?|tl;?dr|quick(ly)?|in a nutshell|one[- ]liner|"
    r"summari[sz]e|yes or no|just the (answer|number|name))\b",
    re.IGNORECASE,
)
_YES_NO = re.compile(
    r"^\W*(is|are|am|was|were|do|does|did|can|could|will|would|should|shall|has|have|had|may|"
    r"might|must)\b",
    re.IGNORECASE,
)


def classify(text: str) -> tuple[str, int | None]:
    """(kind of reply, an explicit token count when the user asked for one)."""
    match = _EXPLICIT.search(text)
    if match:
        raw, unit = match.group(1).lower(), match.group(2).lower()
        count = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
        if count > 0:
            return "explicit", max(1, round(count * _UNIT_TOKENS[unit]))
    words = text.split()
    if _GREETING.search(text) and len(words) <= 8:
        return "greeting", None
    if _LONG.search(text):
        return "long", None
    if _SHORT.search(text):
        return "short", None
    if _YES_NO.search(text) and text.rstrip().endswith("?") and len(words) <= 20:
        return "short", None
    return "normal", None


def reply_length(text: str, replies: ReplyLengths, rng: random.Random) -> tuple[str, int]:
    """(kind, tokens): how long the model 'wants' to answer ``text``."""
    kind, explicit = classify(text)
    if explicit is not None:
        median, sigma, top = explicit, replies.explicit_sigma, max(replies.max_tokens, 32_000)
    else:
        median, sigma, top = replies.median(kind), replies.sigma, replies.max_tokens
    n = round(rng.lognormvariate(math.log(max(median, 1)), sigma)) if sigma > 0 else median
    return kind, max(replies.min_tokens, min(top, n))


def yes_no_opener(text: str, rng: random.Random) -> str | None:
    """A yes/no question is answered yes or no first."""
    if _YES_NO.search(text) and text.rstrip().endswith("?"):
        return rng.choice(("Yes.", "No.", "Yes, in most cases.", "Not quite."))
    return None


GREETING_REPLIES = (
    "Hello! How can I help you today?", "Hi there! What can I do for you?",
    "Hey! What are you working on?", "You're welcome! Anything else I can help with?",
)
