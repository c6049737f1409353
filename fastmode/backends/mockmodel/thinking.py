"""What a reasoning model thinks before it answers: the reasoning text and its summary.

The reasoning length comes from the model's ``ReasoningProfile`` (``backends.reasoning``) at
the request's effort, or from an Anthropic thinking budget, scaled by the task the prompt sets
(``task_scale``: the kind of reply asked for, as ``lengths.classify`` reads it, times the
profile's "hard" multiple for a prompt asking to prove, debug or solve, or carrying code). Its text reads like a model working
the request out (restating it, planning, checking, changing its mind), so Anthropic's
``thinking`` blocks look like thinking; a Responses summary is a few shorter parts, each with a
bold heading, as OpenAI's summaries are. Both are drawn from their own random streams, so the
visible reply of a seeded request is the same at every effort: effort changes only how long the
model thinks first.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from fastmode.backends.mockmodel.agent_task import NONE, read_task
from fastmode.backends.mockmodel.behavior import DEFAULT_REPLY_MEDIANS
from fastmode.backends.mockmodel.harness import user_task
from fastmode.backends.mockmodel.lengths import classify
from fastmode.backends.mockmodel.prose import last_user_text
from fastmode.backends.mockmodel.request import GenerationRequest, Reasoning
from fastmode.backends.mockmodel.schema_strings import key_phrase
from fastmode.backends.mockmodel.streams import Streams
from fastmode.backends.mockmodel.wordbank import (
    ADJECTIVES,
    ADVERBIALS,
    OBJECTS,
    REASONS,
    SUBJECTS,
    TOPICS,
    VERBS,
)
from fastmode.backends.reasoning import ReasoningProfile
from fastmode.backends.tokenizer import count_tokens, tokenize

# summary length as a share of the reasoning, and its bounds (tokens), per summary mode
_SUMMARY = {"auto": (8, 16, 160), "concise": (16, 10, 60), "detailed": (4, 24, 400)}
_SUMMARY_PART_TOKENS = 60
_HARD = re.compile(
    r"\b(prove|proof|derive|debug|solve|algorithm|optimi[sz]e|refactor|calculate|compute|"
    r"puzzle|riddle|why does|what is wrong|fix (this|the|my))\b|```", re.IGNORECASE)


def think(
    req: GenerationRequest, profile: ReasoningProfile, streams: Streams, cap: int | None
) -> Reasoning | None:
    """The reasoning before this reply (None: the model does not think at this effort)."""
    budget = req.thinking_budget
    effort = "budget" if budget is not None else profile.effort(req.effort)
    if effort == "none" or not profile.enabled:
        return None
    n = profile.draw(effort if budget is None else "medium", streams("reasoning"), budget,
                     task_scale(req, profile))
    if cap is not None:
        n = min(n, cap)
    if n <= 0:
        return None
    asked = _last_user(req)
    # a short task is restated as written ("read README.md and …"), a long one by its key words
    short = 0 < len(asked) <= 120 and "\n" not in asked
    topic = key_phrase(asked) or "this request"
    opening = f'The user asks: "{asked.rstrip()}".' if short else \
        f"The user is asking about {topic}."
    tools = [t.name for t in req.tools]
    text = "".join(tokenize(_write(streams("thinking"), n + 1, opening, topic, tools))[:n])
    summary: tuple[str, ...] = ()
    if req.summary is not None:
        share, lo, hi = _SUMMARY.get(req.summary, _SUMMARY["auto"])
        summary = _summarise(streams("summary"), max(lo, min(hi, n // share)), topic)
    return Reasoning(n, text, effort, summary)


def task_scale(req: GenerationRequest, profile: ReasoningProfile) -> float:
    """How long the task the prompt sets is thought about, as a multiple of the effort's
    median: by the kind of reply it asks for (an explicit length, e.g. "in 300 words", between
    the short and the long kinds' multiples, in proportion to a normal reply), times the
    "hard" multiple for a hard task."""
    index, text = user_task(req.messages)
    if req.tools and (index < len(req.messages) - 1 or read_task(text).kind != NONE):
        return profile.scale("step")  # an agent's step: a tool to call, or a result to report
    kind, explicit = classify(text)
    if explicit is not None:
        share = explicit / DEFAULT_REPLY_MEDIANS["normal"]
        scale = min(profile.scale("long"), max(profile.scale("short"), share))
    else:
        scale = profile.scale(kind)
    if kind != "greeting" and _HARD.search(text):
        scale *= profile.scale("hard")
    return scale


def _last_user(req: GenerationRequest) -> str:
    return last_user_text(req.messages)


def _write(rng: random.Random, tokens: int, opening: str, topic: str,
           tools: list[str]) -> str:
    parts: list[str] = []
    total = 0
    for sentence in _thoughts(rng, opening, topic, tools):
        if total >= tokens:
            break
        chunk = (" " if parts else "") + sentence
        parts.append(chunk)
        total += count_tokens(chunk)
    return "".join(parts)


def _thoughts(rng: random.Random, opening: str, topic: str,
              tools: list[str]) -> Iterator[str]:
    c = rng.choice
    yield opening
    if tools:
        yield f"I have {len(tools)} tool{'s' if len(tools) > 1 else ''} available: " \
              f"{', '.join(tools[:4])}."
    while True:
        s, v, o = c(SUBJECTS), c(VERBS), c(OBJECTS)
        kind = rng.randrange(9)
        if kind == 0:
            yield f"Let me think about how {s} would {v} {o}."
        elif kind == 1:
            yield f"First, check whether {s} can {v} {o} {c(ADVERBIALS)}."
        elif kind == 2:
            yield f"Hmm, but {c(REASONS)}."
        elif kind == 3:
            yield f"Wait, that is not right: {s} might {v} {c(OBJECTS)} instead."
        elif kind == 4:
            a, b = rng.sample(TOPICS, 2)
            yield f"So the plan: explain {a} first, then {b}."
        elif kind == 5 and tools:
            yield f"Maybe I should call {c(tools)} to get the details."
        elif kind == 6:
            yield f"I'll keep the answer {c(ADJECTIVES)} and mention {c(TOPICS)}."
        elif kind == 7:
            n = rng.choice((4, 8, 16, 64, 256))
            yield f"With a batch of {n}, {s} would {v} {o}; does that change the answer? No."
        else:
            yield f"That means {s} has to {v} {o} {c(ADVERBIALS)}."


def _summarise(rng: random.Random, tokens: int, topic: str) -> tuple[str, ...]:
    """Summary parts of about ``_SUMMARY_PART_TOKENS`` each, ``tokens`` in all."""
    parts: list[str] = []
    left = tokens
    while left > 0:
        heading = rng.choice(("Considering", "Planning", "Checking", "Weighing", "Clarifying"))
        text = f"**{heading} {rng.choice(TOPICS)}**\n\n"
        text += f"I'm working out {topic} and how {rng.choice(SUBJECTS)} handles it."
        body_goal = min(left, _SUMMARY_PART_TOKENS)
        while count_tokens(text) < body_goal:
            text += (f" I'm checking whether {rng.choice(SUBJECTS)} should "
                     f"{rng.choice(VERBS)} {rng.choice(OBJECTS)}.")
        parts.append(text)
        left -= count_tokens(text)
    return tuple(parts)
