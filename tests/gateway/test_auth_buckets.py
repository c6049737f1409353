"""A key's rate limits are several token buckets taken together: all or nothing.

On a virtual clock, with the in-memory buckets (one process) and the SQLite backend's: a
request refused by its tokens spends nothing from its requests; one too large for a bucket is
refused as such, spending nothing; the refusal says which bucket and when it has room.
"""

from __future__ import annotations

import pytest

from fastmode.gateway.config import ApiKey, AuthConfig, TierLimit
from fastmode.gateway.errors import APIError
from fastmode.gateway.state import SQLiteState
from fastmode.gateway.values.auth import Authenticator


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def auth(state=None) -> tuple[Authenticator, Clock, object]:
    clock = Clock()
    key = ApiKey(key="k", limits={"fast": TierLimit(requests_per_minute=10,
                                                      tokens_per_minute=1000)})
    a = Authenticator(AuthConfig(enabled=True, keys=[key]), clock=clock, state=state)
    return a, clock, a.authenticate("Bearer k")


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_request_refused_by_one_bucket_spends_nothing_from_the_others(tmp_path,
                                                                        backend) -> None:
    state = SQLiteState(tmp_path / "s.db") if backend == "sqlite" else None
    a, clock, who = auth(state)
    for _ in range(3):
        headers = a.check(who, "fast", 300)
    assert headers["x-ratelimit-remaining-requests"] == "7"
    assert headers["x-ratelimit-remaining-tokens"] == "100"
    for _ in range(5):  # each refused by tokens: the requests bucket keeps its 7
        with pytest.raises(APIError) as e:
            a.check(who, "fast", 300)
        assert e.value.status == 429 and "tokens per minute" in e.value.message
        assert float(e.value.headers["retry-after"]) == pytest.approx(12, abs=1)
    clock.t += 12.0  # 200 tokens back at 1,000 a minute
    headers = a.check(who, "fast", 300)
    assert headers["x-ratelimit-remaining-requests"] == "8"  # 7, 2 back in 12 s, 1 taken
    assert headers["x-ratelimit-remaining-tokens"] == "0"


def test_a_request_larger_than_a_bucket_is_refused_as_too_large() -> None:
    a, _, who = auth()
    with pytest.raises(APIError) as e:
        a.check(who, "fast", 5000)
    assert e.value.status == 429 and "Request too large" in e.value.message
    headers = a.check(who, "fast", 10)
    assert headers["x-ratelimit-remaining-requests"] == "9"  # the refusal spent nothing
