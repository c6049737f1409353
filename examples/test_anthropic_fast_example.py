"""Testing an Anthropic fast-mode request and what it is billed: the same answer on the fast
path costs 6x the standard one for claude-opus-4-6 (its published fast-mode prices)."""

import pytest

FAST = {"extra_body": {"speed": "fast"},
        "extra_headers": {"anthropic-beta": "fast-mode-2026-02-01"}}


def test_fast_mode_costs_six_times_standard(fastmode):
    fastmode.reply(match="summarise", text="Batching keeps the GPU busy.")
    client = fastmode.anthropic()
    ask = {"model": "claude-opus-4-6", "max_tokens": 100,
           "messages": [{"role": "user", "content": "summarise batching"}]}
    standard = client.messages.create(**ask)
    fast = client.messages.create(**ask, **FAST)
    assert (standard.usage.speed, fast.usage.speed) == ("standard", "fast")
    assert fast.usage.output_tokens == standard.usage.output_tokens
    billed = [c.cost_usd for c in fastmode.requests]
    assert billed[1] / billed[0] == pytest.approx(6.0, rel=1e-6)
    assert fast.usage.model_extra["cost_usd"] == billed[1]
