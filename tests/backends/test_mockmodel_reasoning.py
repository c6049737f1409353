"""Reasoning in the mock model: lengths per effort, reasoning pieces first, caps, budgets."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from fastmode.backends.mockmodel import (
    REASONING,
    TEXT,
    GenerationRequest,
    ModelBehavior,
    ToolSpec,
    generate,
)
from fastmode.backends.reasoning import (
    DEFAULT_MEDIANS,
    DEFAULT_TASK_SCALE,
    EFFORTS,
    NO_REASONING,
    ReasoningProfile,
)
from fastmode.backends.tokenizer import tokenize
from fastmode.cli import main

THINKER = ModelBehavior(reasoning=ReasoningProfile(enabled=True))
USER = [{"role": "user", "content": "Explain continuous batching to a new engineer"}]


def gen(**kw):
    behavior = kw.pop("behavior", THINKER)
    return generate(GenerationRequest(USER, **kw), behavior=behavior)


def test_effort_sets_the_median_and_each_step_thinks_longer() -> None:
    profile = ReasoningProfile(enabled=True)
    medians = []
    for effort in EFFORTS[1:]:
        draws = [profile.draw(effort, random.Random(s)) for s in range(400)]
        assert statistics.median(draws) == pytest.approx(DEFAULT_MEDIANS[effort], rel=0.12)
        medians.append(statistics.median(draws))
    assert medians == sorted(medians)
    assert profile.draw("none", random.Random(1)) == 0
    assert profile.mean("high") > profile.median("high")  # a lognormal's mean is above it


def test_a_thinking_budget_caps_the_draw() -> None:
    profile = ReasoningProfile(enabled=True, budget_use=0.6)
    draws = [profile.draw("medium", random.Random(s), budget=2000) for s in range(300)]
    assert max(draws) <= 2000
    assert statistics.median(draws) == pytest.approx(1200, rel=0.15)


def test_a_model_that_does_not_reason_never_thinks() -> None:
    assert NO_REASONING.effort("high") == "none"
    g = gen(seed=1, effort="high", max_tokens=3000, behavior=ModelBehavior())
    assert g.reasoning is None and g.reasoning_tokens == 0


def test_reasoning_pieces_come_first_and_the_visible_reply_is_unchanged() -> None:
    plain = gen(seed=4, max_tokens=9000)
    thought = gen(seed=4, max_tokens=9000, effort="low")
    r = thought.reasoning
    assert r is not None and r.tokens > 50 and r.effort == "low"
    assert thought.reasoning_tokens == r.tokens
    assert all(p.tool == REASONING for p in thought.pieces[: r.tokens])
    assert all(p.tool == TEXT for p in thought.pieces[r.tokens:])
    assert "".join(p.text for p in thought.pieces[: r.tokens]) == r.text
    assert len(tokenize(r.text)) == r.tokens
    # effort changes only the thinking: same visible text, billed reasoning on top
    assert thought.text == plain.text
    assert thought.output_tokens == plain.output_tokens + r.tokens


def test_max_tokens_caps_reasoning_and_reply_together() -> None:
    """Reasoning never takes the whole cap (an agent with max_tokens=300 got only
    reasoning): a reply longer than the cap keeps at least half of it..."""
    g = gen(seed=2, max_tokens=60, effort="high")
    assert g.output_tokens == 60 and g.reasoning_tokens == 30
    assert g.text and g.finish_reason == "length"
    g = gen(seed=2, max_tokens=500, effort="minimal")
    assert g.output_tokens <= 500
    assert g.reasoning_tokens < g.output_tokens


def test_a_short_reply_or_a_tool_call_stays_whole_under_a_tight_cap() -> None:
    """...and one that fits keeps all it needs, with the reasoning in the rest of the cap."""
    tool = ToolSpec("get_weather", "Weather for a city", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    for seed in range(20):
        req = GenerationRequest([{"role": "user", "content": "Plan a trip; weather in Paris?"}],
                                seed=seed, tools=(tool,), effort="high", max_tokens=300)
        g = generate(req, behavior=THINKER)
        alone = generate(GenerationRequest(req.messages, seed=seed, tools=(tool,),
                                           max_tokens=300), behavior=THINKER)
        assert g.finish_reason == "tool_calls" and g.tool_calls == alone.tool_calls
        assert 0 < g.reasoning_tokens <= 300 - (alone.output_tokens)
        assert json.loads(g.tool_calls[0].arguments)["city"]
        answer = gen(seed=seed, max_tokens=300, effort="xhigh")
        wanted = gen(seed=seed, max_tokens=300).output_tokens  # without reasoning
        visible = answer.output_tokens - answer.reasoning_tokens
        assert answer.reasoning_tokens > 0 and visible >= min(wanted, 150)
        assert answer.text == gen(seed=seed, max_tokens=visible).text  # a prefix, as capped


def test_reasoning_scales_with_the_task_the_prompt_sets() -> None:
    """"hi" at high effort is a short thought; a hard problem thinks longer than a question."""

    def median(text: str, effort: str = "high", **kw) -> float:
        return statistics.median(
            generate(GenerationRequest([{"role": "user", "content": text}], seed=s,
                                       effort=effort, **kw), behavior=THINKER).reasoning_tokens
            for s in range(60))

    high = DEFAULT_MEDIANS["high"]
    hi = median("hi")
    assert hi == pytest.approx(high * DEFAULT_TASK_SCALE["greeting"], rel=0.25)  # ~150
    assert median("Is Paris in France?") == pytest.approx(
        high * DEFAULT_TASK_SCALE["short"], rel=0.25)
    normal = median("Explain continuous batching to a new engineer")
    assert normal == pytest.approx(high, rel=0.2)
    assert median("Prove that the scheduler never starves a request") == pytest.approx(
        high * DEFAULT_TASK_SCALE["hard"], rel=0.2)
    assert median("Write a long essay about caches") > normal
    # an Anthropic budget is scaled too, and still a cap
    assert median("hi", effort=None, thinking_budget=10_000) < 400
    # a model's config may set its own multiples
    terse = ModelBehavior(reasoning=ReasoningProfile(enabled=True,
                                                     task_scale={"greeting": 0.5}))
    g = generate(GenerationRequest([{"role": "user", "content": "hi"}], seed=1, effort="high"),
                 behavior=terse)
    assert g.reasoning_tokens > 800


def test_reasoning_room_lets_an_uncapped_request_think_beyond_the_default() -> None:
    g = gen(seed=3, max_tokens=100, effort="high", reasoning_room=50_000)
    assert g.reasoning_tokens > 100  # the reasoning used the room ...
    assert 0 < g.output_tokens - g.reasoning_tokens <= 100  # ... the visible reply its cap


def test_ignore_eos_gives_exactly_max_tokens_with_reasoning() -> None:
    g = gen(seed=5, max_tokens=700, effort="low", ignore_eos=True)
    assert g.output_tokens == 700 and 0 < g.reasoning_tokens < 700


def test_reasoning_before_tool_calls_and_summaries() -> None:
    tool = ToolSpec("get_weather", "Weather for a city", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    g = generate(GenerationRequest([{"role": "user", "content": "Weather in Paris?"}], seed=1,
                                   tools=(tool,), effort="medium", summary="auto",
                                   max_tokens=20000), behavior=THINKER)
    assert g.reasoning is not None and g.tool_calls and g.finish_reason == "tool_calls"
    assert "get_weather" in g.reasoning.text  # it thinks about the tools it has
    assert g.reasoning.summary and all(s.startswith("**") for s in g.reasoning.summary)
    detailed = generate(GenerationRequest(USER, seed=1, effort="medium", summary="detailed",
                                          max_tokens=20000), behavior=THINKER)
    concise = generate(GenerationRequest(USER, seed=1, effort="medium", summary="concise",
                                         max_tokens=20000), behavior=THINKER)
    assert detailed.reasoning is not None and concise.reasoning is not None

    def size(r) -> int:
        return sum(len(tokenize(p)) for p in r.summary)

    assert size(detailed.reasoning) > size(concise.reasoning)


def test_a_thinking_budget_on_the_request() -> None:
    g = gen(seed=9, max_tokens=8000, thinking_budget=1024)
    assert g.reasoning is not None and g.reasoning.effort == "budget"
    assert 0 < g.reasoning_tokens <= 1024


# -- predict and simulate --------------------------------------------------------------------


def _json(capsys, argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("tier", ["standard", "fast", "spark"])
def test_predict_moves_the_first_visible_token_by_the_reasoning(capsys, tier: str) -> None:
    plain = _json(capsys, ["predict", "--tier", tier])
    o = _json(capsys, ["predict", "--tier", tier, "--reasoning-effort", "low"])
    assert o["reasoning_tokens"] == DEFAULT_MEDIANS["low"]
    assert o["output_tokens"] == plain["output_tokens"]  # the visible part is unchanged
    assert o["ttft_visible_s"] == pytest.approx(o["ttft_s"] + 400 * o["itl_s"])
    assert plain["ttft_visible_s"] == plain["ttft_s"]
    table = _json(capsys, ["predict", "--tier", tier, "--reasoning-effort", "all"])
    visible = [row["ttft_visible_s"] for row in table["efforts"]]
    assert [row["reasoning_effort"] for row in table["efforts"]] == list(EFFORTS)
    assert visible == sorted(visible)


def test_faster_tiers_buy_back_the_reasoning_wait(capsys) -> None:
    waits = {t: _json(capsys, ["predict", "--tier", t, "--reasoning-effort", "high"])
             for t in ("standard", "fast", "spark")}
    assert waits["standard"]["ttft_visible_s"] > 2 * waits["fast"]["ttft_visible_s"]
    assert waits["fast"]["ttft_visible_s"] > 5 * waits["spark"]["ttft_visible_s"]


def test_predict_reasoning_flags_are_checked(capsys) -> None:
    assert main(["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--chips",
                 "1", "--reasoning-effort", "low"]) == 2
    assert "needs --tier" in capsys.readouterr().err
    o = _json(capsys, ["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                       "--chips", "1", "--reasoning-tokens", "100"])
    assert o["ttft_visible_s"] == pytest.approx(o["ttft_s"] + 100 * o["itl_s"])


def test_simulate_reports_visible_ttft_with_reasoning(capsys) -> None:
    base = ["simulate", "--rate", "2", "--duration", "60", "--seed", "3"]
    plain = _json(capsys, base)
    o = _json(capsys, [*base, "--reasoning-effort", "low"])
    for tier, d in o["tiers"].items():
        assert d["reasoning_tokens"] > 0
        assert d["ttft_visible_s"]["p50"] > d["ttft_s"]["p50"]
        assert plain["tiers"][tier]["ttft_visible_s"] == plain["tiers"][tier]["ttft_s"]
        assert plain["tiers"][tier]["reasoning_tokens"] == 0
    std = o["tiers"]["standard"]
    per_request = std["reasoning_tokens"] / std["completed"]
    assert 250 < per_request < 700  # the lognormal around 400 (its mean is ~450)
