"""Admin fault rules kept in the SQLite state survive a restart: the next ``fastmode serve``
on the same file names them in its banner and applies them; ``--clear-faults`` drops them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from conftest import launch, quick_config_text, stop_server

from fastmode.cli._faults import banner_lines
from fastmode.gateway.config import StateConfig
from fastmode.gateway.state import SQLiteState

ADMIN_KEY = "admin-secret"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
CHAT = {"model": "frontier", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def keep_rules(path: str) -> None:
    state = SQLiteState(path)
    await state.start()
    await state.put_setting("faults", "", "global-503", {"kind": "503", "p": 1.0})
    await state.put_setting("faults", "t-7", "slow", {"kind": "stall", "p": 0.5, "s": 2})
    await state.close()


def test_the_banner_names_each_kept_rule_and_clearing_drops_them(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite3")
    asyncio.run(keep_rules(path))
    lines = banner_lines(StateConfig(path=path), clear=False)
    assert "2 kept in the state" in lines[0] and "--clear-faults" in lines[0]
    assert any("global-503: 503 p=1.0 (every request)" in line for line in lines), lines
    assert any("slow: stall p=0.5 s=2 (test_id t-7)" in line for line in lines), lines
    assert banner_lines(StateConfig(path=path), clear=False) == lines  # reading keeps them
    cleared = banner_lines(StateConfig(path=path), clear=True)
    assert len(cleared) == 1 and "2 kept in the state, cleared" in cleared[0]
    assert banner_lines(StateConfig(path=path), clear=False) == []
    assert banner_lines(StateConfig(path=":memory:"), clear=False) == []


def test_a_rule_left_by_a_killed_run_applies_until_cleared_at_start(tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger.sqlite3")
    text = quick_config_text() + f'\n[admin]\nenabled = true\nkey = "{ADMIN_KEY}"\n'
    proc, url = launch("--ledger", ledger, config_text=text, tmp=tmp_path)
    try:
        r = httpx.post(url + "/admin/faults", headers=ADMIN, json={"kind": "503", "p": 1.0,
                                                                   "name": "left-over"})
        assert r.status_code == 201, r.text
        assert httpx.post(url + "/v1/chat/completions", json=CHAT).status_code == 503
    finally:
        proc.kill()  # no clean-up: the rule stays in the file
        proc.wait()
    proc, url = launch("--ledger", ledger, config_text=text, tmp=tmp_path)
    try:
        assert httpx.post(url + "/v1/chat/completions", json=CHAT).status_code == 503
    finally:
        stop_server(proc)
    assert any("left-over: 503" in line for line in banner_lines(StateConfig(path=ledger),
                                                                 clear=False))
    proc, url = launch("--ledger", ledger, "--clear-faults", config_text=text, tmp=tmp_path)
    try:
        assert httpx.post(url + "/v1/chat/completions", json=CHAT).status_code == 200
        assert httpx.get(url + "/admin/faults", headers=ADMIN).json()["data"] == []
    finally:
        stop_server(proc)
