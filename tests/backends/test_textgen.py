"""The mock model's output: deterministic, plausible, schema-valid, and botched on purpose."""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastmode.backends.mockmodel import (
    BOTCH_KINDS,
    Generation,
    GenerationRequest,
    QualityProfile,
    ScriptRule,
    ToolSpec,
    generate,
    validate_arguments,
)
from fastmode.backends.mockmodel.phrases import bank
from fastmode.backends.tokenizer import count_tokens, tokenize

USER = [{"role": "user", "content": "Explain how continuous batching works."}]

WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather for a city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 2},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
)
ORDER = ToolSpec(
    "create_order",
    "Create a purchase order with line items",
    {
        "type": "object",
        "properties": {
            "customer": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 8},
                    "email": {"type": "string", "format": "email"},
                    "tier": {"enum": ["free", "pro", "enterprise"]},
                },
                "required": ["name", "tier"],
                "additionalProperties": False,
            },
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 4,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string"},
                        "quantity": {"type": "integer", "minimum": 1, "exclusiveMaximum": 10},
                        "price": {"type": "number", "minimum": 0.5, "maximum": 0.75},
                    },
                    "required": ["sku", "quantity"],
                    "additionalProperties": False,
                },
            },
            "due": {"type": "string", "format": "date"},
            "priority": {"anyOf": [{"type": "integer", "minimum": -3, "maximum": -1}, {}]},
            "express": {"type": "boolean"},
            "currency": {"const": "EUR"},
            "notes": {"type": ["string", "null"], "minLength": 12},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "uniqueItems": True},
        },
        "required": ["customer", "items", "currency"],
        "additionalProperties": False,
        "$defs": {"tag": {"type": "string", "enum": ["a", "b", "c", "d"]}},
    },
)
SEARCH = ToolSpec(
    "search_docs",
    "Search the documentation",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
NO_ARGS = ToolSpec("ping", "Check that the service is alive", {})


def gen(
    messages: list[dict[str, Any]] | None = None,
    quality: QualityProfile | None = None,
    scripts: tuple[ScriptRule, ...] = (),
    **kwargs: Any,
) -> Generation:
    kwargs.setdefault("seed", 7)
    req = GenerationRequest(messages=messages or USER, **kwargs)
    return generate(req, quality or QualityProfile(), scripts)


def assert_consistent(g: Generation) -> None:
    """Pieces are single tokens that rebuild the text or the arguments exactly."""
    assert all(tokenize(p.text) == [p.text] for p in g.pieces)
    content = "".join(p.text for p in g.pieces if p.tool == -1)
    assert content == g.text
    assert count_tokens(g.text) == sum(p.tool == -1 for p in g.pieces)
    for k, call in enumerate(g.tool_calls):
        assert "".join(p.text for p in g.pieces if p.tool == k) == call.arguments


# --------------------------------------------------------------------------- text


def test_same_seed_same_output_and_different_seeds_differ() -> None:
    assert gen(seed=42) == gen(seed=42)
    texts = {gen(seed=s).text for s in range(20)}
    assert len(texts) == 20


def test_temperature_zero_is_deterministic_and_unseeded_sampling_varies() -> None:
    assert gen(seed=None, temperature=0.0) == gen(seed=None, temperature=0.0)
    assert gen(seed=None, temperature=1.0).text != gen(seed=None, temperature=1.0).text


def test_text_is_varied_prose_not_one_word() -> None:
    g = gen(max_tokens=400, ignore_eos=True)
    words = re.findall(r"[a-z]+", g.text.lower())
    assert len(set(words)) >= 60
    content = [w for w in words if w not in {"the", "a", "of", "is", "per", "for"}]
    assert Counter(content).most_common(1)[0][1] / len(content) < 0.08
    assert {".", ","} <= set(g.text)
    assert_consistent(g)


def test_the_phrase_bank_is_the_same_in_every_process_and_a_reply_rarely_repeats() -> None:
    """Seeded replies are the same everywhere only if every process composes the same bank."""
    here = hashlib.sha256("\x00".join(bank().sentences).encode()).hexdigest()
    there = subprocess.run(
        [sys.executable, "-c", "import hashlib; from fastmode.backends.mockmodel.phrases import "
         "bank; print(hashlib.sha256(chr(0).join(bank().sentences).encode()).hexdigest())"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "7"})
    assert there.stdout.strip() == here
    g = gen(seed=8, max_tokens=3000, ignore_eos=True)
    seen = [g.text.count(s) for s in set(bank().sentences) if s in g.text]
    assert sum(seen) >= 100  # ~45 sentences per 1,000 tokens
    assert len(seen) / sum(seen) > 0.9  # few of them twice
    assert_consistent(g)


def test_natural_length_is_plausible() -> None:
    lengths = [gen(seed=s).output_tokens for s in range(150)]
    assert all(g >= 20 for g in lengths)
    assert 130 <= statistics.median(lengths) <= 300
    assert max(lengths) <= 1600
    g = gen(seed=3)
    assert g.finish_reason == "stop"
    assert g.text.rstrip()[-1] in ".?!`:"
    assert_consistent(g)


def test_max_tokens_cuts_exactly_and_keeps_the_prefix() -> None:
    full = gen(seed=11)
    assert full.output_tokens > 30
    capped = gen(seed=11, max_tokens=30)
    assert capped.finish_reason == "length"
    assert capped.output_tokens == 30
    assert full.text.startswith(capped.text)
    assert_consistent(capped)
    roomy = gen(seed=11, max_tokens=full.output_tokens + 50)
    assert roomy.text == full.text and roomy.finish_reason == "stop"


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1000, 3000])
def test_ignore_eos_gives_exactly_max_tokens(n: int) -> None:
    g = gen(seed=n, max_tokens=n, ignore_eos=True)
    assert g.output_tokens == n
    assert count_tokens(g.text) == n
    assert g.finish_reason == "length"
    assert_consistent(g)


def test_ignore_eos_without_max_tokens_uses_natural_length() -> None:
    assert gen(seed=5, ignore_eos=True).text == gen(seed=5).text


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), cap=st.integers(0, 400))
def test_text_invariants(seed: int, cap: int) -> None:
    g = gen(seed=seed, max_tokens=cap)
    assert g.output_tokens <= cap
    assert g.finish_reason in ("stop", "length")
    assert (g.finish_reason == "length") == (
        g.output_tokens == cap and cap < gen(seed=seed).output_tokens
    )
    assert_consistent(g)


def test_stop_sequence_cuts_before_first_occurrence() -> None:
    full = gen(seed=9, max_tokens=300, ignore_eos=True).text
    i_the, i_dot = full.index(" the"), full.index(".")
    g = gen(seed=9, max_tokens=300, ignore_eos=True, stop=[".", " the", "no-such-thing"])
    assert g.text == full[: min(i_the, i_dot)]
    assert g.finish_reason == "stop"
    assert " the" not in g.text and "." not in g.text
    assert_consistent(g)
    assert gen(seed=9, stop=["", "zzzz-never"]).text == gen(seed=9).text


def test_stop_beyond_the_cap_does_not_apply() -> None:
    full = gen(seed=9, max_tokens=300, ignore_eos=True).text
    capped = gen(seed=9, max_tokens=5)
    tail_word = full[len(capped.text) :].split()[3]
    g = gen(seed=9, max_tokens=5, stop=[tail_word])
    assert g.finish_reason == "length" and g.output_tokens == 5


# --------------------------------------------------------------------------- tools


@pytest.mark.parametrize("tool", [WEATHER, ORDER, SEARCH, NO_ARGS])
def test_tool_arguments_validate_over_many_seeds(tool: ToolSpec) -> None:
    for seed in range(150):
        g = gen(seed=seed, tools=[tool])
        assert g.finish_reason == "tool_calls"
        assert g.text == ""
        (call,) = g.tool_calls
        assert call.name == tool.name and call.botched is None
        assert re.fullmatch(r"call_[A-Za-z0-9]{24}", call.id)
        assert isinstance(json.loads(call.arguments), dict)
        assert validate_arguments(tool.parameters, call.arguments) == []
        assert all(p.tool == 0 for p in g.pieces)
        assert_consistent(g)


def test_arguments_honour_optional_keywords_somewhere() -> None:
    seen: set[str] = set()
    for seed in range(60):
        args = json.loads(gen(seed=seed, tools=[ORDER]).tool_calls[0].arguments)
        seen |= set(args)
        assert args["currency"] == "EUR"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.get("due", "2020-01-01"))
    assert seen == set(ORDER.parameters["properties"])  # every optional property shows up


def test_string_arguments_echo_the_user() -> None:
    msgs = [{"role": "user", "content": "What is the weather in Lyon today?"}]
    args = json.loads(gen(msgs, tools=[WEATHER]).tool_calls[0].arguments)
    assert args["city"] == "Lyon"


def test_tool_is_chosen_by_shared_words() -> None:
    msgs = [{"role": "user", "content": "Please search the documentation for batching"}]
    for seed in range(10):
        assert gen(msgs, seed=seed, tools=[WEATHER, SEARCH, ORDER]).tool_calls[0].name == (
            "search_docs"
        )


def test_tool_choice_none_and_after_tool_result_give_text() -> None:
    assert gen(tools=[WEATHER], tool_choice="none").tool_calls == ()
    first = gen(tools=[WEATHER]).tool_calls[0]
    convo = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": first.id,
                    "type": "function",
                    "function": {"name": first.name, "arguments": first.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": first.id, "content": '{"temp": 21}'},
    ]
    g = gen(convo, tools=[WEATHER])
    assert g.tool_calls == () and g.finish_reason == "stop"
    assert g.text.startswith("Based on the result of get_weather")
    assert gen(convo, tools=[WEATHER], tool_choice="required").tool_calls  # forced: still calls


def test_forced_tool_and_unknown_forced_tool() -> None:
    for seed in range(5):
        g = gen(seed=seed, tools=[WEATHER, SEARCH], tool_choice="search_docs")
        assert g.tool_calls[0].name == "search_docs"
    with pytest.raises(ValueError, match="unknown tool"):
        gen(tools=[WEATHER], tool_choice="nope")


def test_max_tokens_truncates_tool_arguments() -> None:
    g = gen(tools=[ORDER], max_tokens=5)
    assert g.finish_reason == "length" and g.output_tokens == 5
    assert g.tool_calls[0].arguments == "".join(p.text for p in g.pieces)


# --------------------------------------------------------------------------- botching


def botch_detected(call: Any, tool: ToolSpec, tools: list[ToolSpec]) -> bool:
    """What a gateway or eval can see: a wrong name or an invalid arguments document."""
    if call.name not in {t.name for t in tools}:
        return True
    return bool(validate_arguments(tool.parameters, call.arguments, strict=True))


def test_every_botch_kind_is_produced_and_detected() -> None:
    kinds: Counter[str] = Counter()
    tools = [WEATHER, ORDER]
    for seed in range(200):
        for tool in tools:
            g = gen(seed=seed, tools=tools, tool_choice=tool.name, quality=QualityProfile(1.0))
            call = g.tool_calls[0]
            assert call.botched in BOTCH_KINDS
            kinds[call.botched] += 1
            assert botch_detected(call, tool, tools), call
            if call.botched == "malformed_json":
                with pytest.raises(ValueError):
                    json.loads(call.arguments)
            if call.botched == "unknown_tool":
                assert call.name.startswith(("get", "fetch", "create", "make"))
    assert set(kinds) == set(BOTCH_KINDS)
    assert min(kinds.values()) > 40


def test_botch_kind_weights_and_fallback() -> None:
    only_missing = QualityProfile(1.0, {"missing_required": 1.0})
    assert gen(tools=[WEATHER], quality=only_missing).tool_calls[0].botched == "missing_required"
    # no required property to drop: another kind is chosen instead
    fallback = QualityProfile(1.0, {"missing_required": 5.0, "invented_argument": 1.0})
    call = gen(tools=[NO_ARGS], quality=fallback).tool_calls[0]
    assert call.botched == "invented_argument"
    assert validate_arguments(NO_ARGS.parameters, call.arguments, strict=True)
    assert validate_arguments(NO_ARGS.parameters, call.arguments) == []  # permissive schema


def test_botch_rate_is_about_the_configured_rate() -> None:
    spark = QualityProfile(tool_error_rate=0.05)
    botched = sum(
        gen(seed=s, tools=[SEARCH], quality=spark).tool_calls[0].botched is not None
        for s in range(2000)
    )
    assert 60 <= botched <= 145  # 100 expected, sd ~10
    assert gen(seed=1, tools=[SEARCH], quality=spark) == gen(seed=1, tools=[SEARCH], quality=spark)


# --------------------------------------------------------------------------- scripts


def test_scripts_match_and_win() -> None:
    scripts = (
        ScriptRule(match=r"(?i)\bdeploy\b", reply="Deploying now. Done."),
        ScriptRule(match="weather", tool_name="get_weather", tool_arguments={"city": "Oslo"}),
        ScriptRule(match="deploy", reply="never reached"),
    )
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Please DEPLOY it"}]}]
    g = gen(msgs, scripts=scripts, tools=[WEATHER], quality=QualityProfile(1.0))
    assert g.text == "Deploying now. Done." and g.tool_calls == ()
    assert g.finish_reason == "stop"
    assert_consistent(g)
    msgs = [{"role": "user", "content": "weather?"}]
    assert gen(msgs, scripts=scripts).tool_calls == ()  # its tool not offered: never called
    g = gen(msgs, scripts=scripts, tools=[WEATHER], quality=QualityProfile(1.0))
    assert g.finish_reason == "tool_calls"
    assert (g.tool_calls[0].name, g.tool_calls[0].arguments) == ("get_weather", '{"city":"Oslo"}')
    assert g.tool_calls[0].botched is None


def test_scripts_obey_caps_and_apply_only_after_a_user_turn() -> None:
    scripts = (ScriptRule(match="deploy", reply="Deploying now. Done."),)
    msgs = [{"role": "user", "content": "deploy"}]
    assert gen(msgs, scripts=scripts, max_tokens=2).text == "Deploying"
    assert gen(msgs, scripts=scripts, stop=["."]).text == "Deploying now"
    after_tool = [*msgs, {"role": "tool", "tool_call_id": "x", "content": "deploy"}]
    assert gen(after_tool, scripts=scripts).text != "Deploying now. Done."


# --------------------------------------------------------------------------- checker


def test_validate_arguments_reports_problems() -> None:
    schema = WEATHER.parameters
    assert validate_arguments(schema, '{"city":"Paris","unit":"celsius"}') == []
    assert validate_arguments(schema, '{"city":"Paris","unit":"celsius","days":3.0}') == []
    problems = validate_arguments(schema, '{"city":"P","unit":"kelvin","days":true,"x":1}')
    text = " | ".join(problems)
    for fragment in ("shorter than", "not one of", "expected integer", "unexpected property"):
        assert fragment in text
    assert validate_arguments(schema, '{"unit":"celsius","days":9}') == [
        "$: missing required property 'city'",
        "$.days: 9 is out of range",
    ]
    assert validate_arguments(schema, "[1]") == ["arguments must be a JSON object, got array"]
    assert validate_arguments(schema, '{"city":')[0].startswith("arguments are not valid JSON")
    bad_items = (
        '{"customer":{"name":"a","tier":"pro"},"items":[],"currency":"EUR","tags":["a","a"]}'
    )
    text = " | ".join(validate_arguments(ORDER.parameters, bad_items))
    assert "fewer than 1 items" in text and "not unique" in text
