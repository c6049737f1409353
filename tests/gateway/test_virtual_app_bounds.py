"""The engine apps' virtual-time loop (``virtual_app.py``) bounds every wait: a condition
that never holds fails after its modeled limit, a run past the horizon fails."""

from __future__ import annotations

import asyncio

import pytest
from virtual_app import HORIZON_S, ModeledTimeout, VirtualAppLoop, run_app_virtual, until


def test_a_wait_for_a_condition_is_bounded_in_modeled_time() -> None:
    async def main(loop: VirtualAppLoop) -> float:
        start = loop.time()
        with pytest.raises(ModeledTimeout, match="never"):
            await until(lambda: False, "never", limit_s=120.0)
        return loop.time() - start

    assert 120.0 <= run_app_virtual(main) < 121.0


def test_a_run_past_the_horizon_fails() -> None:
    async def main(loop: VirtualAppLoop) -> None:
        while True:
            await asyncio.sleep(10.0)

    with pytest.raises(ModeledTimeout, match=f"{HORIZON_S:.0f} modeled seconds"):
        run_app_virtual(main)
