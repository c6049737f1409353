"""The virtual-time loop the engine tests run on (``virtual_loop.py``) never waits forever: a
wait for a condition that never holds fails after a bounded amount of modeled time, at once
in wall time, and so does a run whose clock passes the loop's horizon."""

from __future__ import annotations

import asyncio
import time

import pytest
from virtual_loop import HORIZON_S, ModeledTimeout, VirtualTimeLoop, run_virtual, until


def test_until_returns_when_the_condition_holds() -> None:
    async def main(loop: VirtualTimeLoop) -> float:
        start, flag = loop.time(), []
        loop.call_later(5.0, flag.append, True)
        await until(lambda: bool(flag), "the flag")
        return loop.time() - start

    waited = run_virtual(main)
    assert waited == pytest.approx(5.0, abs=0.011)  # the first look after the flag


def test_until_fails_after_its_modeled_limit() -> None:
    async def main(loop: VirtualTimeLoop) -> float:
        start = loop.time()
        try:
            await until(lambda: False, "a condition that never holds", limit_s=60.0)
        except ModeledTimeout as exc:
            assert "a condition that never holds" in str(exc)
            return loop.time() - start
        raise AssertionError("until returned")

    t0 = time.perf_counter()
    assert 60.0 <= run_virtual(main) < 61.0
    assert time.perf_counter() - t0 < 30.0  # modeled time, not wall time


def test_a_run_past_the_horizon_fails() -> None:
    async def main(loop: VirtualTimeLoop) -> None:
        while True:  # a wait with no end of its own
            await asyncio.sleep(10.0)

    with pytest.raises(ModeledTimeout, match=f"{HORIZON_S:.0f} modeled seconds"):
        run_virtual(main)
