"""Testing a retry path: the first call gets a 429, the SDK's retry succeeds."""


def test_a_429_then_success(fastmode):
    fastmode.fail("429", times=1, s=0)  # this test's next request only; retry-after: 0 s
    client = fastmode.openai(max_retries=2)
    r = client.chat.completions.with_raw_response.create(
        model="frontier-spark", messages=[{"role": "user", "content": "hi"}])
    assert r.retries_taken == 1
    assert r.parse().choices[0].message.content
    assert len(fastmode.requests) == 1  # the refused attempt never reached the engine
