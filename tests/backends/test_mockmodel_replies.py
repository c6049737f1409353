"""Reply lengths that fit the request, and parallel tool calls, in the mock model."""

from __future__ import annotations

import statistics

import pytest

from fastmode.backends.mockmodel import GenerationRequest, ModelBehavior, ToolSpec, generate
from fastmode.backends.mockmodel.lengths import classify


def lengths(text: str, n: int = 60, **kw) -> list[int]:
    msgs = [{"role": "user", "content": text}]
    return [generate(GenerationRequest(msgs, seed=s, **kw)).output_tokens for s in range(n)]


@pytest.mark.parametrize("text,kind", [
    ("hi", "greeting"), ("Say hi", "greeting"), ("thanks!", "greeting"),
    ("Is Lisbon in Portugal?", "short"), ("Briefly, what is TTFT?", "short"),
    ("Explain continuous batching", "normal"), ("How long does prefill take?", "normal"),
    ("Write a long story about a GPU", "long"), ("Explain the KV cache in detail", "long"),
    ("Answer in 300 words", "explicit"), ("Give me three sentences on caching", "explicit"),
])
def test_requests_are_classified(text: str, kind: str) -> None:
    assert classify(text)[0] == kind


def test_reply_length_fits_the_request() -> None:
    hi = statistics.median(lengths("Say hi"))
    yes_no = statistics.median(lengths("Is the fast tier more expensive?"))
    normal = statistics.median(lengths("Explain continuous batching"))
    story = statistics.median(lengths("Write a long story about a scheduler"))
    assert hi <= 20 < yes_no < normal < story
    assert story >= 600
    words = statistics.median(lengths("Explain prefill in 500 words"))
    assert 500 <= words <= 800  # ~1.3 tokens per word


def test_max_tokens_still_caps_and_ignore_eos_is_exact() -> None:
    assert max(lengths("Write a long story about a scheduler", n=10, max_tokens=50)) == 50
    assert set(lengths("hi", n=5, max_tokens=300, ignore_eos=True)) == {300}


def test_a_greeting_gets_a_greeting() -> None:
    g = generate(GenerationRequest([{"role": "user", "content": "hello"}], seed=1))
    assert g.text.startswith(("Hello", "Hi", "Hey"))
    g = generate(GenerationRequest([{"role": "user", "content": "thank you"}], seed=1))
    assert g.text.startswith("You're welcome")


TOOLS = (
    ToolSpec("get_weather", "Current weather for a city",
             {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"]}),
    ToolSpec("get_time", "Local time in a city",
             {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"]}),
    ToolSpec("search_docs", "Search the documentation",
             {"type": "object", "properties": {"query": {"type": "string"}},
              "required": ["query"]}),
)
ASK = [{"role": "user", "content": "What is the weather and the time in Paris?"}]


def calls(seed: int, **kw):
    behavior = kw.pop("behavior", ModelBehavior(parallel_tool_share=0.5))
    return generate(GenerationRequest(ASK, seed=seed, tools=TOOLS, **kw), behavior=behavior)


def test_a_share_of_turns_calls_tools_in_parallel() -> None:
    counts = [len(calls(s).tool_calls) for s in range(200)]
    parallel = sum(c > 1 for c in counts)
    assert 70 <= parallel <= 130  # share 0.5
    assert max(counts) <= 3
    g = next(calls(s) for s in range(200) if len(calls(s).tool_calls) > 1)
    names = [c.name for c in g.tool_calls]
    assert len(set(names)) == len(names)  # different tools
    assert len({c.id for c in g.tool_calls}) == len(names)
    assert [p.tool for p in g.pieces] == sorted(p.tool for p in g.pieces)  # call after call
    assert {p.tool for p in g.pieces} == set(range(len(names)))
    assert g.finish_reason == "tool_calls"


def test_parallel_calls_are_reproducible_and_can_be_turned_off() -> None:
    assert [c.arguments for c in calls(11).tool_calls] == \
        [c.arguments for c in calls(11).tool_calls]
    assert all(len(calls(s, parallel_tool_calls=False).tool_calls) == 1 for s in range(60))
    assert all(len(calls(s, tool_choice="get_time").tool_calls) == 1 for s in range(30))


def test_after_the_tool_results_the_model_answers_in_text() -> None:
    g = next(calls(s) for s in range(100) if len(calls(s).tool_calls) > 1)
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in g.tool_calls]}]
    history += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in g.tool_calls]
    reply = generate(GenerationRequest(history, seed=1, tools=TOOLS),
                     behavior=ModelBehavior(parallel_tool_share=1.0))
    assert reply.tool_calls == () and reply.text


def test_a_cap_cuts_parallel_calls() -> None:
    full = next(calls(s) for s in range(100) if len(calls(s).tool_calls) > 1)
    seed = next(s for s in range(100) if len(calls(s).tool_calls) > 1)
    first = len([p for p in full.pieces if p.tool == 0])
    capped = calls(seed, max_tokens=first + 2)
    assert capped.finish_reason == "length" and capped.output_tokens == first + 2
    assert len(capped.tool_calls) == 2


def test_capped_is_replace_of_the_three_fields() -> None:
    """``GenerationRequest.capped`` lists the fields by hand (it runs on every request): it must
    keep every other field, including any added later."""
    import dataclasses

    from fastmode.backends.mockmodel.request import GenerationRequest, ResponseFormat, ToolSpec

    values: dict[str, object] = {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7, "stop": ("x",),
        "seed": 3, "temperature": 0.5, "tools": (ToolSpec("f"),), "tool_choice": "f",
        "ignore_eos": True, "model": "m", "response_format": ResponseFormat("json_object"),
        "effort": "high", "thinking_budget": 99, "summary": "auto",
        "parallel_tool_calls": False, "reasoning_room": 5}
    assert set(values) == {f.name for f in dataclasses.fields(GenerationRequest)}
    r = GenerationRequest(**values)  # type: ignore[arg-type]
    assert r.capped(11, "n", 13) == dataclasses.replace(r, max_tokens=11, model="n",
                                                        reasoning_room=13)


@pytest.mark.parametrize("opener", [None, "Sure — here it is, in short."])
def test_the_writers_tokens_are_the_tokens_of_its_whole_text(opener: str | None) -> None:
    """The prose is split chunk by chunk as it is written and never again: that holds only
    while the chunks' tokens are the whole text's (every chunk opens with whitespace)."""
    import random

    from fastmode.backends.mockmodel.prose import write_at_least, write_tokens
    from fastmode.backends.tokenizer import tokenize

    for seed in range(400):
        tokens = write_tokens(random.Random(seed), 200, opener)
        assert len(tokens) >= 200
        assert tokenize("".join(tokens)) == tokens
        assert write_at_least(random.Random(seed), 200, opener) == "".join(tokens)
