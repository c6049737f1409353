"""``bench/asgi_servers.py``'s helpers: the CPU of a whole process tree, thread by thread, the
table, and the bare app's set-up through the environment. No server is started and granian
need not be installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import asgi_servers, bare_asgi
from bench.asgi_servers import CpuMeter, TreeCpu, footer, process_tree, table, tree_cpu


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_tree_holds_the_process_and_its_children_threads_and_all() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = process_tree(os.getpid())
        assert tree[0] == os.getpid()
        assert child.pid in tree
        assert (child.pid, child.pid) in tree_cpu(os.getpid()).threads
    finally:
        child.kill()
        child.wait()


def test_the_schedstat_sum_is_the_process_cpu_clock_threads_included() -> None:
    release = threading.Event()

    def work() -> None:
        _spin(0.05)
        release.wait(10)

    meter = CpuMeter()
    p0 = time.process_time()
    s0 = meter.add(tree_cpu(os.getpid()))
    worker = threading.Thread(target=work)
    worker.start()
    _spin(0.05)
    time.sleep(0.01)
    look = tree_cpu(os.getpid())
    s1 = meter.add(look)
    p1 = time.process_time()
    release.set()
    worker.join()
    assert (os.getpid(), threading.main_thread().native_id) in look.threads
    assert (os.getpid(), worker.native_id) in look.threads
    assert 0.1 <= s1 - s0 <= p1 - p0  # both threads' spins; never more than the CPU clock
    meter.add(tree_cpu(os.getpid()))
    assert meter.lost >= 1  # the worker, gone since


def test_the_meter_adds_each_threads_growth_and_counts_threads_gone() -> None:
    meter = CpuMeter()
    assert meter.add(TreeCpu({(1, 1): 1_000, (1, 2): 500}, (0.0, 0.0))) == 1.5e-6
    # thread 2 gone, thread 3 new (counted from zero), thread 1 grew by 2 µs
    assert meter.add(TreeCpu({(1, 1): 3_000, (2, 3): 4_000}, (0.0, 0.0))) == pytest.approx(
        7.5e-6)
    assert meter.lost == 1


def _row(cpu: float, **more: Any) -> dict[str, Any]:
    return {"cpu_us": cpu, "sys_us": cpu / 2, "per_s": 1000 / cpu, "slowest": 0.99,
            "fastest": 1.0, "slips": 0, "lag_s": 0.0, "threads": 5, "processes": 1, "lost": 0,
            "ticks_vs_sched": 1.0, "others_ms": 0.0, "steal_ms": 0.0, **more}


def test_the_table_sets_the_servers_side_by_side() -> None:
    res = {"requests": {"uvicorn": [_row(400), _row(420), _row(380)],
                        "granian": [_row(300), _row(200), _row(250)]},
           "steady": {"uvicorn": [_row(8.0)], "granian": [_row(6.0, slowest=0.9)]}}
    lines = table(res, 2000, 1000)
    assert lines[0] == "| row | uvicorn | granian | granian / uvicorn |"
    assert lines[1] == "|---|---|---|---|"
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:])
    cpu = next(line for line in lines if "µs per request" in line)
    assert "2,000 streams" in cpu and "| 400 (380–420) | 250 (200–300) | 0.62× |" in cpu
    assert any("90.0%..100.0%" in line for line in lines)
    assert not any("interval8" in line for line in lines)  # a row not run is left out
    assert footer(res).startswith("CPU summed over: uvicorn: 1 process(es), 5 threads")
    assert "granian 0 ms of other CPU, 0 ms stolen" in footer(res)


def test_a_cores_busy_and_stolen_time_grow() -> None:
    core = sorted(os.sched_getaffinity(0))[0]
    busy, steal = asgi_servers.core_times(core)
    assert busy > 0 and steal >= 0
    assert asgi_servers.core_times(None) == (0.0, 0.0)


def test_a_missing_granian_is_one_line_naming_the_install(monkeypatch: Any) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "granian" else real(name, *a))
    with pytest.raises(SystemExit) as exc:
        asgi_servers.require_granian()
    assert str(exc.value) == "granian is not installed: .venv/bin/pip install granian"


def test_the_bare_app_takes_its_streams_and_pace_from_the_environment(
        tmp_path: Path, monkeypatch: Any) -> None:
    caps = tmp_path / "captures.json"
    caps.write_bytes(orjson.dumps({"short": {"opening": "", "events": ["a", "b", "c"],
                                             "closing": "", "tokens": 3, "interval": 2}}))
    monkeypatch.setenv(bare_asgi.ENV_CAPTURES, str(caps))
    monkeypatch.setenv(bare_asgi.ENV_ITL, "0.001")
    monkeypatch.setattr(bare_asgi, "CAPTURES", {})
    monkeypatch.setattr(bare_asgi, "TICKER", None, raising=False)
    bare_asgi.load()
    assert bare_asgi.TICKER.itl == 0.001
    assert bare_asgi.CAPTURES["short"].due == [2, 3, 3]
