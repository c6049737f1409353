"""Reasoning through every protocol: reasoning tokens before the visible reply (in usage, billed
as output, in the modeled TTFT of the visible text), Responses reasoning items with summaries
and encrypted content, Anthropic thinking blocks with signatures, and the cost in every final
usage."""

from __future__ import annotations

import json

import anthropic
import openai
import orjson
import pytest
from conftest import quick_config_text
from starlette.testclient import TestClient
from test_turn import app_client, config_from  # noqa: F401 - the fixture
from virtual_app import app_client as virtual_client
from virtual_app import run_app_virtual

from fastmode.backends.engine import build
from fastmode.gateway.app import create_app
from fastmode.gateway.config import default_config_text, load_config

THINK = [{"role": "user", "content": "Explain the trade-offs of continuous batching"}]


def with_behavior(behavior: str) -> str:
    """The default config with its ``[behavior.*]`` tables replaced."""
    text = default_config_text()
    start = text.index("[behavior.frontier]")
    end = text.index("# Scripted replies")
    return text[:start] + behavior + "\n" + text[end:]


# every effort thinks a fixed number of tokens (sigma 0), few enough for a quick test
FIXED = with_behavior("""
[behavior.frontier]
reasoning = true
reasoning_sigma = 0.0
[behavior.frontier.reasoning_tokens]
minimal = 12
low = 40
medium = 80
[behavior.frontier-spark]
reasoning = true
reasoning_sigma = 0.0
[behavior.frontier-spark.reasoning_tokens]
minimal = 12
low = 40
medium = 80
""")
# the distil does not reason at all
NO_SPARK = FIXED[:FIXED.index("[behavior.frontier-spark]")] + """
[behavior.frontier-spark]
reasoning = false
""" + FIXED[FIXED.index("# Scripted replies"):]


def oa(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x")


def cost(tier: str, prompt: int, output: int) -> float:
    """What the default config's tier charges (its prices may be derived, so read them)."""
    return build(load_config().sim()).tiers[tier].prices.cost(prompt, 0, output)


# -- in process, on a config with fixed reasoning lengths -----------------------------------


def visible_ttft(time_info: dict) -> float:
    return time_info["queue_time"] + time_info["prompt_time"] + time_info["reasoning_time"]


@pytest.mark.parametrize("path,model", [("/v1", "frontier"), ("/fast/v1", "frontier"),
                                        ("/v1", "frontier-spark")])
def test_reasoning_raises_visible_ttft_by_the_modeled_reasoning_time(
        tmp_path, path, model) -> None:
    """On the virtual clock, where every modeled time is exact (no host lag)."""
    config = config_from(FIXED, tmp_path)

    async def main(loop) -> None:
        bodies = {}
        async with virtual_client(config) as client:
            for effort in ("none", "low"):
                r = await client.post(path + "/chat/completions", json={
                    "model": model, "messages": THINK, "seed": 3, "max_completion_tokens": 100,
                    "reasoning_effort": effort})
                assert r.status_code == 200, r.text
                bodies[effort] = r.json()
        plain, thought = bodies["none"], bodies["low"]
        details = thought["usage"]["completion_tokens_details"]
        assert details["reasoning_tokens"] == 40
        assert plain["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
        # the same visible reply, capped by what the reasoning left of max_completion_tokens
        assert plain["choices"][0]["message"]["content"].startswith(
            thought["choices"][0]["message"]["content"])
        assert thought["usage"]["completion_tokens"] == 100
        ti, ti0 = thought["time_info"], plain["time_info"]
        assert ti0["reasoning_time"] == 0 and ti["host_lag_time"] == 0
        per_token = ti0["completion_time"] / (plain["usage"]["completion_tokens"] - 1)
        assert ti["reasoning_time"] == pytest.approx(40 * per_token, rel=0.02)
        assert visible_ttft(ti) - visible_ttft(ti0) == pytest.approx(ti["reasoning_time"],
                                                                     rel=0.02)

    run_app_virtual(main)


async def test_a_model_that_does_not_reason_refuses_effort(
        app_client, tmp_path) -> None:  # noqa: F811
    _, client = await app_client(config_from(NO_SPARK, tmp_path))
    r = await client.post("/v1/chat/completions", json={
        "model": "frontier-spark", "messages": THINK, "reasoning_effort": "high"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort"
    r = await client.post("/v1/messages", json={
        "model": "frontier-spark", "max_tokens": 3000, "messages": THINK,
        "thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = await client.post("/v1/chat/completions", json={
        "model": "frontier-spark", "messages": THINK, "reasoning_effort": "none",
        "max_completion_tokens": 5})
    assert r.status_code == 200


async def test_reasoning_summary_events_stream_in_order(app_client, tmp_path) -> None:  # noqa: F811
    _, client = await app_client(config_from(quick_config_text(FIXED), tmp_path))
    r = await client.post("/v1/responses", json={
        "model": "frontier", "input": "Why is decode memory bound?", "stream": True,
        "max_output_tokens": 200, "reasoning": {"effort": "medium", "summary": "auto"}})
    events = [orjson.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert events[2]["item"]["type"] == "reasoning" and events[2]["output_index"] == 0
    done = kinds.index("response.output_item.done")
    assert kinds.index("response.reasoning_summary_part.added") < done
    assert kinds.index("response.reasoning_summary_text.delta") < done
    assert kinds.index("response.reasoning_summary_text.done") < done
    assert done < kinds.index("response.output_text.delta")  # thinking before the answer
    deltas = "".join(e["delta"] for e in events
                     if e["type"] == "response.reasoning_summary_text.delta")
    item = events[done]["item"]
    assert deltas == "".join(s["text"] for s in item["summary"])
    message_added = [e for e in events if e["type"] == "response.output_item.added"][1]
    assert message_added["output_index"] == 1
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 80
    assert final["reasoning"] == {"effort": "medium", "summary": "auto"}


def test_reasoning_and_structured_output_over_the_websocket(tmp_path) -> None:
    """The same turn pipeline on the Responses websocket: reasoning item first, then the
    structured reply."""
    schema = {"type": "object", "properties": {"plan": {"type": "string"},
                                               "steps": {"type": "integer", "minimum": 1}},
              "required": ["plan", "steps"], "additionalProperties": False}
    app = create_app(config_from(FIXED, tmp_path))
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses") as ws:
        ws.send_text(orjson.dumps({
            "type": "response.create", "model": "frontier", "input": "Plan the rollout",
            "reasoning": {"effort": "minimal", "summary": "auto"}, "max_output_tokens": 400,
            "text": {"format": {"type": "json_schema", "name": "plan", "schema": schema,
                                "strict": True}}}).decode())
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "error",
                                                       "response.failed"):
            events.append(orjson.loads(ws.receive_text()))
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["reasoning", "message"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 12
    value = json.loads(final["output"][1]["content"][0]["text"])
    assert set(value) == {"plan", "steps"} and value["steps"] >= 1
    assert final["text"]["format"]["name"] == "plan"


async def test_every_final_usage_carries_the_cost_with_reasoning(
        app_client, tmp_path) -> None:  # noqa: F811
    """Item 8: the final usage of every protocol prices the whole reply, reasoning included
    (on a faster B200 node: the prices are the same, the replies take less time)."""
    app, client = await app_client(config_from(quick_config_text(FIXED), tmp_path))
    prices = app.state.gateway.spec.tiers["standard"].prices

    def events(text: str) -> list[dict]:
        return [orjson.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")
                and line[6:].startswith("{")]

    r = await client.post("/v1/responses", json={
        "model": "frontier", "input": "Why batch?", "stream": True, "max_output_tokens": 30,
        "reasoning": {"effort": "low"}})
    last = events(r.text)[-1]
    assert last["type"] == "response.incomplete"  # 40 reasoning tokens > the 30 allowed...
    usage = last["response"]["usage"]
    assert usage["output_tokens"] == 30
    # ...but reasoning never takes the whole cap: the reply keeps half of it
    assert usage["output_tokens_details"]["reasoning_tokens"] == 15
    assert usage["cost_usd"] == pytest.approx(prices.cost(usage["input_tokens"], 0, 30))
    assert [o["type"] for o in last["response"]["output"]] == ["reasoning", "message"]
    r = await client.post("/v1/chat/completions", json={
        "model": "frontier", "messages": THINK, "stream": True, "reasoning_effort": "minimal",
        "max_completion_tokens": 40, "stream_options": {"include_usage": True}})
    usage = events(r.text)[-1]["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 12
    assert usage["cost_usd"] == pytest.approx(
        prices.cost(usage["prompt_tokens"], 0, usage["completion_tokens"]))
    r = await client.post("/v1/messages", json={
        "model": "frontier", "messages": THINK, "stream": True, "max_tokens": 2000,
        "thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}})
    delta = next(e for e in events(r.text) if e["type"] == "message_delta")["usage"]
    start = next(e for e in events(r.text) if e["type"] == "message_start")["message"]["usage"]
    assert delta["output_tokens_details"]["thinking_tokens"] == 40
    assert delta["cost_usd"] == start["cost_usd"] == pytest.approx(
        prices.cost(delta["input_tokens"], 0, delta["output_tokens"]))


# -- with the official SDKs on the default config (faster hardware: quick_server) ----------


def test_chat_usage_counts_and_bills_reasoning(quick_server: str) -> None:
    stream = oa(quick_server).chat.completions.create(
        model="frontier-spark", messages=THINK, reasoning_effort="low", seed=2,
        max_completion_tokens=3000, stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        else:
            usage = chunk.usage
    assert usage is not None and text
    thought = usage.completion_tokens_details.reasoning_tokens
    assert 50 < thought < usage.completion_tokens
    expected = cost("spark", usage.prompt_tokens, usage.completion_tokens)
    assert usage.model_extra["cost_usd"] == pytest.approx(expected)


def test_responses_reasoning_item_round_trip(quick_server: str) -> None:
    client = oa(quick_server)
    first = client.responses.create(
        model="frontier-spark", input="Plan a migration of the cache", max_output_tokens=3000,
        reasoning={"effort": "low", "summary": "concise"},
        include=["reasoning.encrypted_content"], store=False)
    item = first.output[0]
    assert item.type == "reasoning" and item.summary and item.encrypted_content
    assert first.output[1].type == "message" and first.output_text
    usage = first.usage
    assert 0 < usage.output_tokens_details.reasoning_tokens < usage.output_tokens
    # the client sends the reasoning back with its next turn, as the guides say
    back = [item.model_dump(exclude_none=True), first.output[1].model_dump(exclude_none=True),
            {"role": "user", "content": "And the rollback?"}]
    second = client.responses.create(model="frontier-spark", input=back, max_output_tokens=50)
    assert second.status in ("completed", "incomplete")
    back[0]["encrypted_content"] = item.encrypted_content[:-4] + "0000"
    with pytest.raises(openai.BadRequestError, match="could not be verified"):
        client.responses.create(model="frontier-spark", input=back, max_output_tokens=50)


def test_responses_stream_helper_accepts_reasoning(quick_server: str) -> None:
    with oa(quick_server).responses.stream(
            model="frontier-spark", input="Why batch?", max_output_tokens=2000,
            reasoning={"effort": "minimal", "summary": "auto"}) as stream:
        final = stream.get_final_response()
    kinds = [o.type for o in final.output]
    assert kinds == ["reasoning", "message"]
    assert final.usage.model_extra["cost_usd"] > 0


def test_anthropic_thinking_blocks_and_signatures(quick_server: str) -> None:
    client = anthropic.Anthropic(base_url=quick_server, api_key="x")
    with client.messages.stream(
            model="frontier-spark", max_tokens=4000, messages=THINK,
            thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    thinking, text = final.content[0], final.content[1]
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature
    assert text.type == "text" and text.text
    assert "thinking" in kinds and "signature" in kinds
    usage = final.usage
    thought = usage.output_tokens_details.thinking_tokens
    assert 0 < thought <= 1024 and usage.output_tokens > thought
    expected = cost("spark", usage.input_tokens, usage.output_tokens)
    assert usage.model_extra["cost_usd"] == pytest.approx(expected)
    # the thinking block goes back with the next turn; an altered one is refused
    history = [*THINK, {"role": "assistant", "content": [b.model_dump() for b in final.content]},
               {"role": "user", "content": "Shorter, please."}]
    again = client.messages.create(model="frontier-spark", max_tokens=50, messages=history)
    assert again.content
    history[1]["content"][0]["thinking"] += " (edited)"
    with pytest.raises(anthropic.BadRequestError, match="signature"):
        client.messages.create(model="frontier-spark", max_tokens=50, messages=history)


def test_anthropic_thinking_checks(quick_server: str) -> None:
    client = anthropic.Anthropic(base_url=quick_server, api_key="x")
    with pytest.raises(anthropic.BadRequestError, match="greater than"):
        client.messages.create(model="frontier", max_tokens=1500, messages=THINK,
                               thinking={"type": "enabled", "budget_tokens": 2000})
    with pytest.raises(anthropic.BadRequestError, match="1024"):
        client.messages.create(model="frontier", max_tokens=1500, messages=THINK,
                               thinking={"type": "enabled", "budget_tokens": 500})
    omitted = client.messages.create(
        model="frontier-spark", max_tokens=3000, messages=THINK,
        thinking={"type": "adaptive", "display": "omitted"}, output_config={"effort": "low"})
    assert omitted.content[0].type == "thinking" and omitted.content[0].thinking == ""
    assert omitted.content[0].signature
