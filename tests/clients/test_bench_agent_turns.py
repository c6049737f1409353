"""``bench/agent_turns.py``: a session's turns resend the whole conversation and grow by one call
and its output, and the CPU meter counts a busy thread. No server is started."""

from __future__ import annotations

import os
import threading
import time

import orjson

from bench.agent_turns import AGENTS, RECORDED, on_cpu


def test_each_turn_resends_the_conversation_with_one_more_call_and_its_output() -> None:
    base = orjson.loads(RECORDED.read_bytes())
    bodies = [orjson.loads(b) for b in AGENTS["codex"].turns(base, 4, 7)]
    assert [len(b["input"]) for b in bodies] == [len(base["input"]) + 2 * k for k in range(4)]
    for before, after in zip(bodies, bodies[1:], strict=False):
        assert after["input"][: len(before["input"])] == before["input"]
        call, output = after["input"][-2:]
        assert call["type"] == "function_call" and output["type"] == "function_call_output"
        assert call["call_id"] == output["call_id"] and call["call_id"].startswith("call_7_")
    assert all(b["stream"] and b["store"] is False and "max_output_tokens" not in b
               for b in bodies)


def test_the_meter_counts_every_thread_that_runs() -> None:
    spun, done = threading.Event(), threading.Event()

    def spin() -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        spun.set()
        done.wait(10)

    before = on_cpu(os.getpid())
    t = threading.Thread(target=spin)
    t.start()
    try:
        assert spun.wait(10)
        assert on_cpu(os.getpid()) - before >= 0.19  # the other thread's time, counted
    finally:
        done.set()
        t.join()


def test_a_messages_turn_adds_the_agents_tool_use_and_its_result() -> None:
    base = {"model": "claude-opus-4-8", "max_tokens": 100, "system": "s",
            "messages": [{"role": "user", "content": "read README.md"}]}
    bodies = [orjson.loads(b) for b in AGENTS["claude"].turns(base, 3, 1)]
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5]
    last = bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    use, result = last[-2]["content"][0], last[-1]["content"][0]
    assert use["type"] == "tool_use" and result["type"] == "tool_result"
    assert result["tool_use_id"] == use["id"] == "call_1_1"
    assert all(b["model"] == "frontier-spark" and b["stream"] and "store" not in b
               for b in bodies)
