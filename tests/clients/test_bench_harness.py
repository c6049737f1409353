"""The benchmarks' harness: the load generator yields the cores to the servers it measures."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.harness import yielding


def _policy_of_child() -> int:
    """The scheduling policy a process started now inherits."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                         check=True, capture_output=True, text=True).stdout
    return int(out)


def test_the_client_polls_at_idle_priority_and_gets_its_policy_back() -> None:
    before = os.sched_getscheduler(0)
    with yielding():
        assert os.sched_getscheduler(0) == os.SCHED_IDLE
        assert _policy_of_child() == os.SCHED_IDLE  # why servers start before the block
    assert os.sched_getscheduler(0) == before == os.SCHED_OTHER
    assert _policy_of_child() == os.SCHED_OTHER
