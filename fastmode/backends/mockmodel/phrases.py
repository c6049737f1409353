"""The writer's phrases, composed once: sentences, list items and code blocks from templates.

A reply is made of thousands of these, and composing one costs about eight random draws, a
template and a tokenizer scan. Composed once per process from a fixed seed (the same bank in
every process, so a seeded reply is the same everywhere) and each split into tokens once, a
phrase then costs the writer one draw and a reply's tokens are copies of the bank's
(``tokens_of``). 4,096 sentences: about one 1,000-token reply (~45 sentences) in four repeats
one, which a reader does not notice in prose about serving systems.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from fastmode.backends.mockmodel.wordbank import (
    ADJECTIVES,
    ADVERBIALS,
    CODE_BLOCKS,
    FUNC_NAMES,
    OBJECTS,
    OPENERS,
    REASONS,
    SUBJECTS,
    TOPICS,
    VAR_NAMES,
    VERBS,
)
from fastmode.backends.tokenizer import tokenize

SENTENCES = 4096  # composed sentences in the bank
CLAUSES = 512  # list items
BLOCKS = 256  # code blocks
SEED = "fastmode prose bank"  # the bank's own seed: every process composes the same bank
TOKENIZED = 1 << 15  # chunks whose tokens are kept (the bank's, with their separators)


@dataclass(frozen=True, slots=True)
class Bank:
    sentences: tuple[str, ...]
    clauses: tuple[str, ...]
    code_blocks: tuple[str, ...]


@functools.cache
def bank() -> Bank:
    """The phrases, composed and split into tokens after each separator the writer puts
    before them (``tokens_of``), on first use: ~60 ms, which the server spends at start-up."""
    composer = _Composer(random.Random(SEED))
    made = Bank(tuple(composer.sentence() for _ in range(SENTENCES)),
                tuple(composer.short_clause() for _ in range(CLAUSES)),
                tuple(composer.code_block() for _ in range(BLOCKS)))
    for sentence in made.sentences:
        for sep in SENTENCE_SEPARATORS:
            tokens_of(sep + sentence)
    for clause in made.clauses:
        for marker in LIST_MARKERS:
            tokens_of(marker + clause)
    for block in made.code_blocks:
        tokens_of("\n\n" + block)
    return made


SENTENCE_SEPARATORS = ("", " ", "\n\n")  # a reply's first, a paragraph's next, its first
# a list item's beginning: the first of its list, or a later one; numbered or not
LIST_MARKERS = ("\n\n- ", "\n- ", "\n\n1. ", *(f"\n{i}. " for i in range(2, 6)))


@functools.lru_cache(maxsize=TOKENIZED)
def tokens_of(chunk: str) -> tuple[str, ...]:
    """``tokenize(chunk)``, kept: the writer's chunks are the bank's phrases after one of a few
    separators, so nearly every chunk of a reply was split before. The bank's ~13,000 chunks
    share their token strings (a vocabulary of a few thousand): ~4 MB kept in all."""
    shared = _SHARED
    return tuple([shared.setdefault(t, t) for t in tokenize(chunk)])


_SHARED: dict[str, str] = {}  # token text -> the one string of it the kept chunks hold


def _third_person(verb: str) -> str:
    """'batch' -> 'batches', 'retry' -> 'retries', 'account for' -> 'accounts for'."""
    head, _, tail = verb.partition(" ")
    if head.endswith(("s", "sh", "ch", "x", "z")):
        head += "es"
    elif head.endswith("y") and head[-2:-1] not in "aeiou":
        head = head[:-1] + "ies"
    else:
        head += "s"
    return f"{head} {tail}" if tail else head


def capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


class _Composer:
    """The templates, drawn from ``rng``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.choice = rng.choice  # (composed once: the draws' speed does not matter here)
        self.randint = rng.randint

    def code_block(self) -> str:
        c = self.choice
        template = c(CODE_BLOCKS)
        return template.format(
            fn=c(FUNC_NAMES),
            var=c(VAR_NAMES),
            n=c((8, 16, 32, 64, 128, 256, 512, 1024)),
            m=self.randint(2, 99),
        )

    def short_clause(self) -> str:
        c = self.choice
        return f"{capitalized(c(SUBJECTS))} {_third_person(c(VERBS))} {c(OBJECTS)}."

    def sentence(self) -> str:
        """One sentence from a dozen templates; subjects are singular, so verbs agree."""
        rng, c, randint = self.rng, self.choice, self.randint
        s, s2 = c(SUBJECTS), c(SUBJECTS)
        v, v2 = c(VERBS), c(VERBS)
        o, o2 = c(OBJECTS), c(OBJECTS)
        kind = randint(0, 12)
        if kind == 0:
            return f"{c(OPENERS)} {s} {_third_person(v)} {o} {c(ADVERBIALS)}."
        if kind == 1:
            return f"{capitalized(s)} {_third_person(v)} {o}, {c(REASONS)}."
        if kind == 2:
            return f"When {s} is {c(ADJECTIVES)}, {s2} {_third_person(v)} {o}."
        if kind == 3:
            return f"{capitalized(c(TOPICS))} matters here: {s} {_third_person(v)} {o} {c(ADVERBIALS)}."
        if kind == 4:
            return f"Why does {s} {v} {o} {c(ADVERBIALS)}? Mostly for {c(TOPICS)}."
        if kind == 5:
            n, pct = c((45, 65, 170, 450, 1200, 1800)), randint(20, 95)
            return f"{capitalized(s)} {_third_person(v)} about {n} tokens per second ({pct}% of peak)."
        if kind == 6:
            n = c((4, 8, 16, 32, 64, 128))
            return (
                f"With a batch of {n}, {s} {_third_person(v)} {o}; "
                f"{s2} {_third_person(v2)} {o2} {c(ADVERBIALS)}."
            )
        if kind == 7:
            return f"{capitalized(s)} does not {v} {o} {c(ADVERBIALS)}."
        if kind == 8:
            a, b = rng.sample(ADJECTIVES, 2)
            t1, t2 = rng.sample(TOPICS, 2)
            return f"The trade-off is simple: {a} {t1} versus {b} {t2}."
        if kind == 9:
            return f"If {s} {_third_person(v)} {o}, {s2} can {v2} {o2} {c(ADVERBIALS)}."
        if kind == 10:
            ms = c((2, 5, 12, 20, 35, 80))
            return f"Roughly {ms} ms per step is typical for {s} {c(ADVERBIALS)}."
        if kind == 11:
            return f'{capitalized(s)} — the "{c(TOPICS)}" part — {_third_person(v)} {o}.'
        return f"{capitalized(s)} {_third_person(v)} {o} {c(ADVERBIALS)}."
