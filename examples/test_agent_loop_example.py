"""Testing an OpenAI-SDK agent loop: the model's tool call and its final answer scripted."""

import json

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def run_agent(client, question: str) -> str:
    """The code under test: call tools until the model answers."""
    messages = [{"role": "user", "content": question}]
    while True:
        msg = client.chat.completions.create(model="frontier", messages=messages,
                                             tools=TOOLS).choices[0].message
        if not msg.tool_calls:
            return msg.content
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            city = json.loads(call.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": f"{city}: sunny, 24 C"})


def test_the_agent_uses_the_tool_then_answers(fastmode):
    fastmode.reply(match=r"weather in (\w+)",
                   tool_call={"name": "get_weather", "arguments": {"city": r"\1"}})
    fastmode.reply(match=r"(\w+): sunny", text=r"It is sunny in \1.")
    assert run_agent(fastmode.openai(), "What is the weather in Lyon?") == "It is sunny in Lyon."
    first, second = fastmode.requests
    assert first.reply["tool_calls"][0]["arguments"] == {"city": "Lyon"}
    assert second.messages[-1]["content"] == "Lyon: sunny, 24 C"
    fastmode.assert_all_replies_used()
    fastmode.assert_no_unexpected_calls()
