"""What ``fastmode bench`` sends: tier routes, prompts and tools around the shared workload.

Tier mix, length distributions and arrival order come from the top-level ``workload`` package,
the one definition ``fastmode simulate`` draws from too (``--compare-sim`` depends on it); this
module adds what only a client needs: routes, prompt text and tool definitions.

A request is described by a ``RequestSpec`` (tier, messages, max_tokens, tools) whichever way the
workload is given: drawn from flags by a seeded ``Sampler`` or read from a JSONL trace
(``clients.trace``). ``Route`` says where a tier's requests go (base path and model id).

Prompts are built from short words (at most 6 letters, letters only): fastmode's tokenizer
counts each such word as one token and a one-message chat prompt as its words plus 7 framing
tokens, so a prompt of N tokens is N - 7 words. Real tokenizers land within ~10-20% of that.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fastmode.workload import (
    DIST_KINDS,
    LOGNORMAL_SIGMA,
    LengthDist,
    RequestShape,
    ShapeSampler,
    WorkloadError,
    normalise_mix,
)
from fastmode.workload import parse_mix as parse_shares

__all__ = [
    "BENCH_TOOLS",
    "CHAT_FRAMING_TOKENS",
    "DEFAULT_ROUTES",
    "DIST_KINDS",
    "LOGNORMAL_SIGMA",
    "TOOL_MIN_MAX_TOKENS",
    "FlagWorkload",
    "LengthDist",
    "PromptBuilder",
    "RequestSpec",
    "Route",
    "Sampler",
    "WorkloadError",
    "parse_mix",
    "parse_routes",
]

CHAT_FRAMING_TOKENS = 7  # 3 per message + role + 3 priming the reply (OpenAI cookbook recipe)
TOOL_MIN_MAX_TOKENS = 256  # tool calls are not capped below this: truncated JSON is not a botch


@dataclass(frozen=True)
class Route:
    """Where one tier's requests go: ``{url}{path}/chat/completions`` with ``model``."""

    path: str
    model: str


DEFAULT_ROUTES: dict[str, Route] = {
    "standard": Route("/v1", "frontier"),
    "fast": Route("/fast/v1", "frontier"),
    "spark": Route("/v1", "frontier-spark"),
}


def parse_mix(text: str) -> dict[str, float]:
    """``standard=0.7,fast=0.2,spark=0.1`` -> shares normalised to sum 1 (zeros dropped)."""
    return normalise_mix(parse_shares(text, flag="--mix"))


def parse_routes(overrides: list[str], model: str | None = None) -> dict[str, Route]:
    """Default fastmode routes, then ``--model M`` (every tier), then
    ``--tier NAME=MODEL[@PATH]``."""
    routes = dict(DEFAULT_ROUTES)
    if model:
        routes = {name: Route(r.path, model) for name, r in routes.items()}
    for item in overrides:
        name, sep, rest = item.partition("=")
        model_id, at, path = rest.partition("@")
        if not sep or not name.strip() or not model_id.strip():
            raise WorkloadError(f"--tier: expected NAME=MODEL[@PATH], got {item!r}")
        path = path.strip() if at else routes.get(name.strip(), Route("/v1", "")).path
        if not path.startswith("/"):
            raise WorkloadError(f"--tier: path must start with '/', got {path!r}")
        routes[name.strip()] = Route(path.rstrip("/"), model_id.strip())
    return routes


# --------------------------------------------------------------------------- prompts and tools

_WORDS = (
    "the a of and to in is it for on with as was at by be this from or have an not are but all "
    "they one had you were her can there use each which she do how their if will up other about "
    "out many then them these so some would make like him into time has look two more write go "
    "see number no way could people my than first water been call who oil its now find long "
    "down day did get come made may part over new sound take only little work know place year "
    "live me back give most very after thing our just name good sense man think say great where "
    "help past much before line right too mean old any same tell boy follow came want show "
    "also around form three small set put end does large must big even such turn here why ask "
    "went men read need land differ home us move try kind hand photo again change off play "
    "spell air away animal house point page letter mother answer found study still learn should "
    "world high every near add food across own below nation plant last school father keep tree "
    "never start city earth eye light though head under story saw left few while along might "
    "close seem next hard open sample begin life always those both paper meet got group often "
    "run import until child side feet car mile night walk white sea began grow took river four "
    "carry state once book hear stop inside second later miss idea enough eat face watch far "
    "really almost let above girl maybe hill cut young talk soon list song being leave family"
).split()
assert all(len(w) <= 6 and w.isalpha() for w in _WORDS)


class PromptBuilder:
    """Prompts of ~N tokens: slices of a fixed pseudo-random word pool at random offsets."""

    POOL = 1 << 16

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed ^ 0x5EED)
        self.pool = rng.choices(_WORDS, k=self.POOL)
        self.rng = rng

    def text(self, words: int) -> str:
        words = max(1, words)
        if words >= self.POOL:
            reps = words // self.POOL + 1
            return " ".join((self.pool * reps)[:words])
        i = self.rng.randrange(self.POOL - words + 1)
        return " ".join(self.pool[i : i + words])

    def messages(self, prompt_tokens: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.text(prompt_tokens - CHAT_FRAMING_TOKENS)}]


BENCH_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "minLength": 1},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the documentation",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
                },
                "required": ["query", "max_results"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_ticket",
            "description": "Open a ticket in the tracker",
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1},
                    "priority": {"type": "string", "enum": ["low", "medium", "high"]},
                    "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                },
                "required": ["title", "priority"],
                "additionalProperties": False,
            },
        },
    },
]


# --------------------------------------------------------------------------- request specs


@dataclass(slots=True)
class RequestSpec:
    """One request to send. ``offset``: arrival time from the trace (None when generated)."""

    tier: str
    messages: list[dict[str, Any]]
    max_tokens: int
    prompt_tokens: int | None = None  # the intended prompt length, when known
    tools: list[dict[str, Any]] | None = None
    offset: float | None = None
    ignore_eos: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FlagWorkload:
    """A workload drawn from flags: tier mix, prompt and output lengths, share with tools."""

    mix: dict[str, float]
    prompt: LengthDist
    output: LengthDist
    tools_share: float = 0.0
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.tools_share <= 1.0:
            raise WorkloadError(f"--tools-share: must be in [0, 1], got {self.tools_share}")
        if not self.mix:
            raise WorkloadError("--mix: empty")


class Sampler:
    """Draws request specs from a ``FlagWorkload``: the shared request shapes, dressed up.

    Tier and lengths come from ``workload.ShapeSampler`` on ``rng`` (the stream ``fastmode
    simulate`` draws from with the same seed); prompt words and the tools coin have streams of
    their own, so they never shift the simulator's draws.
    """

    def __init__(self, wl: FlagWorkload) -> None:
        self.wl = wl
        self.rng = random.Random(wl.seed)
        self.tools_rng = random.Random(wl.seed + 31337)
        self.prompts = PromptBuilder(wl.seed)
        self.shapes = ShapeSampler(wl.mix, wl.prompt, wl.output)
        self.names = self.shapes.tiers

    def draw(self) -> RequestSpec:
        return self._spec(self.shapes.draw(self.rng))

    def _spec(self, shape: RequestShape) -> RequestSpec:
        prompt = max(CHAT_FRAMING_TOKENS + 1, shape.prompt_tokens)
        output = shape.output_tokens
        share = self.wl.tools_share
        with_tools = share > 0 and self.tools_rng.random() < share
        spec = RequestSpec(shape.tier, self.prompts.messages(prompt), output, prompt)
        if with_tools:
            spec.tools = BENCH_TOOLS
            spec.max_tokens = max(output, TOOL_MIN_MAX_TOKENS)
            spec.ignore_eos = False
            spec.extra = {"tool_choice": "required"}
        return spec

    def __iter__(self) -> Iterator[RequestSpec]:
        while True:
            yield self.draw()

    def timed(
        self, rate: float, arrivals: str, phase: float = 0.0
    ) -> Iterator[tuple[float, RequestSpec]]:
        """Open-loop (start offset, request) pairs from one random stream, drawn in the order
        ``fastmode simulate`` draws them (``ShapeSampler.timed``): with the same seed, mix and
        lengths, the bench sends the very requests the simulator predicts for."""
        for t, shape in self.shapes.timed(rate, arrivals, self.rng):
            yield t + phase, self._spec(shape)
