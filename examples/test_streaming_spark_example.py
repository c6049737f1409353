"""Testing a streaming UI on the spark tier. The plugin's server runs at ``time_scale`` 0.01
(``fastmode_time_scale``): a 1,000-token answer streams in a few wall milliseconds, and the
times it reports are the model's."""


def test_a_long_spark_stream(fastmode):
    fastmode.reply(match="essay", text="Rivers carve valleys. " * 400)  # past the cap
    stream = fastmode.openai().chat.completions.create(
        model="frontier-spark", max_tokens=1000, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Write a long essay about rivers."}])
    chunks = [c for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == 1000 and text.startswith("Rivers carve")
    assert chunks[-2].choices[0].finish_reason == "length"
    (call,) = fastmode.requests
    assert call.tier == "spark" and call.usage["output_tokens"] == 1000
