"""Rough edges a new user met: ``fastmode chat`` without a server, the speed of a
very short reply, cost noise, a stray ``created`` in ``time_info``, tables cut when piped."""

from __future__ import annotations

import io

import httpx
import pytest
from rich.table import Table

from fastmode.cli import _common, main
from fastmode.clients.events import Done, Summary, TextDelta, Usage


def test_chat_without_a_server_names_the_url(capsys) -> None:
    assert main(["chat", "--url", "http://127.0.0.1:1", "hi"]) == 1
    err = capsys.readouterr().err
    assert "http://127.0.0.1:1/v1/chat/completions" in err and "fastmode serve" in err


def summary(deltas: list[float], output_tokens: int, time_info: dict | None) -> Summary:
    s = Summary("http/chat", "m", started=0.0)
    for t in deltas:
        s.feed(TextDelta("x", t))
    s.feed(Usage(5, output_tokens, 0, deltas[-1]))
    s.feed(Done("stop", deltas[-1], time_info=time_info))
    return s


def test_a_short_reply_reports_no_absurd_speed() -> None:
    # 9 billed tokens (reasoning included), two visible deltas read 0.4 ms apart
    burst = summary([1.0, 1.0004], 9, None)
    assert burst.tokens_per_s is None and "— ·" in burst.line()  # not "20,000 tok/s"
    # the server's modeled completion time, when it reports one, spans every token
    modeled = summary([1.0, 1.0004], 9, {"completion_time": 0.12})
    assert modeled.tokens_per_s == pytest.approx(8 / 0.12)
    measured = summary([1.0, 1.01, 1.02, 1.03], 4, None)  # a plain server, 100 tok/s
    assert measured.tokens_per_s == pytest.approx(100)


def test_piped_tables_keep_their_width(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(_common.sys, "stdout", out)
    con = _common.console()
    table = Table("a very long column title that would not fit in 80", "another long one here",
                  "and a third column title")
    table.add_row("x" * 30, "y" * 30, "z" * 30)
    con.print(table)
    text = out.getvalue()
    assert "…" not in text and "a very long column title that would not fit in 80" in text


def test_cost_has_no_float_noise_and_time_info_no_created(live_server: str) -> None:
    for _ in range(5):
        r = httpx.post(live_server + "/v1/chat/completions", timeout=30, json={
            "model": "frontier-spark", "max_tokens": 7,
            "messages": [{"role": "user", "content": "Explain batching"}]}).json()
        cost = r["usage"]["cost_usd"]
        assert cost == round(cost, 9) and len(repr(cost)) < 16, cost
        assert "created" not in r["time_info"] and r["created"] > 0
