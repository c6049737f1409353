"""An agent loop with tool calls (OpenAI Chat Completions): what the README records and replays.

    python examples/agent_loop.py http://127.0.0.1:8000/v1

Asks for the weather, runs each tool call the model makes (a fake, deterministic tool) and
sends the results back until the model answers in text; prints every step. Against a recording
gateway (``fastmode serve --record DIR``) the session is recorded; against a replaying one
(``fastmode serve --replay DIR``) it gets the same answers, byte for byte, without the upstream.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from openai import OpenAI

MODEL = os.environ.get("MODEL", "frontier")
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def get_weather(city: str) -> str:
    return f"18 C and sunny in {city}"


def run(base_url: str, question: str = "What is the weather in Lyon?") -> list[str]:
    """The loop; returns its steps (each tool call with its id, then the answer)."""
    client = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"),
                    max_retries=0)
    messages: list[Any] = [{"role": "user", "content": question}]
    steps = []
    while True:
        reply = client.chat.completions.create(model=MODEL, messages=messages,
                                               tools=TOOLS).choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            steps.append(f"answer: {reply.content}")
            return steps
        for call in reply.tool_calls:
            fn = getattr(call, "function", None)  # a function call (not a custom tool's)
            if fn is None:
                continue
            args = json.loads(fn.arguments)
            steps.append(f"{fn.name}({fn.arguments}) [{call.id}]")
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": get_weather(str(args.get("city", "")))})


if __name__ == "__main__":
    for step in run(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"):
        print(step)
