"""The 1.2 perf overview's Llama 3.3 70B table, whole: every cell
of the page's table is a figure, and each row's batch cap and step budget are what
`trtllm-bench`'s heuristic gives for it (the rule the Qwen3 rows' test checks,
tests/backends/test_qwen3_kv.py)."""

from __future__ import annotations

import pytest
from test_qwen3_kv import V12, _kv_element_bytes, _requests_estimate, stated_heuristic

from fastmode.backends.calibrate import load_published
from fastmode.backends.calibrate.scope import scored_only_reason
from fastmode.backends.profiles import Catalog

CAT = Catalog.builtin()
# the page's table (NVIDIA/TensorRT-LLM 03e27c7d, docs/source/developer-guide/perf-overview.md,
# "LLaMA v3.3 70B"): output tokens/s per GPU by ISL/OSL and column; empty cells are absent
TABLE = {
    (1000, 1000): {"b200x1": 6920, "gb200-nvl72x1": 7769, "h200x2": 2587, "h100-sxmx2": 2209},
    (1024, 1024): {"b200x1": 6842, "gb200-nvl72x1": 7751, "h200x2": 2582},
    (1024, 8192): {"b200x1": 3242, "gb200-nvl72x1": 3805, "h200x2": 2009},
    (8192, 1024): {"b200x1": 1362, "gb200-nvl72x1": 1491, "h200x2": 537, "h100-sxmx2": 398},
    (32768, 1024): {"b200x1": 274, "gb200-nvl72x1": 302, "h200x2": 120},
}


def _rows():
    _, figs = load_published()
    return [f for f in figs if f.source == V12 and f.model == "llama-3.1-70b"]


def test_every_cell_of_the_table_is_a_fitted_figure():
    rows = {(f.prompt_tokens, f.output_tokens, f"{f.hardware}x{f.chips}"): f for f in _rows()}
    cells = {(i, o, col): v for (i, o), cols in TABLE.items() for col, v in cols.items()}
    assert set(rows) == set(cells)
    for key, f in rows.items():
        assert f.value == cells[key], f.id
        assert f.precision == ("fp4" if f.chips == 1 else "fp8"), f.id
        assert scored_only_reason(f, CAT) == "", f.id  # a dense model: fitted


def test_batch_cap_and_step_budget_are_the_heuristics():
    for f in _rows():
        r, bs, budget, ranks = stated_heuristic(f)
        assert ranks == 1 and f.max_batched_tokens == budget and f.max_batch == bs, f.id
        assert r == pytest.approx(_requests_estimate(f, _kv_element_bytes(f)), rel=0.03), f.id
