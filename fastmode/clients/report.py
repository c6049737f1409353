"""The bench report: its JSON document and its rich tables (``fastmode.cli.bench`` prints them).

The JSON document (``--json FILE``) holds every figure and the run's parameters::

    {"fastmode_bench": 1, "params": {...}, "generator": {...}, "window": {...},
     "tiers": {TIER: {...}}, "overall": {...}, "totals": {...},
     "compare_sim": {"simulate_args": [...], "rows": [...]}}        # with --compare-sim

Times are in seconds in the JSON and in milliseconds in the tables. The PNG plots are
``clients.plots``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table

SCHEMA_VERSION = 1


def fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    ms = seconds * 1000
    if ms >= 10_000:
        return f"{seconds:,.1f} s"
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def fmt_usd(x: float | None) -> str:
    if x is None:
        return "–"
    return f"${x:,.4f}" if abs(x) < 1 else f"${x:,.2f}"


def json_safe(obj: object) -> Any:
    """JSON-safe: non-finite floats become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def json_safe_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """A JSON document made JSON-safe (``json_safe`` on each value): still a document."""
    return {k: json_safe(v) for k, v in doc.items()}


def document(
    summary: dict[str, Any],
    params: dict[str, Any],
    generator: dict[str, Any],
    compare_sim: dict[str, Any] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {"fastmode_bench": SCHEMA_VERSION, "params": params,
                           "generator": generator, **summary}
    if compare_sim is not None:
        doc["compare_sim"] = compare_sim
    return json_safe_doc(doc)


def write_json(path: str | Path, doc: dict[str, Any]) -> None:
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")


def _rows(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = list(summary["tiers"].items())
    if len(rows) > 1:
        rows.append(("all", summary["overall"]))
    return rows


def latency_table(summary: dict[str, Any]) -> Table:
    w = summary["window"]
    t = Table(title=f"Latency per tier (ms) — {w['measured_requests']} measured requests "
                    f"over {w['span_s']:.1f} s", title_justify="left")
    for col in ("tier", "ok/sent", "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p99",
                "TPOT p50", "E2E p50", "E2E p99"):
        t.add_column(col, justify="left" if col == "tier" else "right", no_wrap=col == "tier")
    for name, g in _rows(summary):
        if name == "all":
            t.add_section()
        tt, itl, e2e = g["ttft_s"], g["itl_s"], g["e2e_s"]
        t.add_row(
            name, f"{g['ok']}/{g['requests']}", fmt_ms(tt["p50"]), fmt_ms(tt["p90"]),
            fmt_ms(tt["p99"]), fmt_ms(itl["p50"]), fmt_ms(itl["p99"]),
            fmt_ms(g["tpot_s"]["p50"]), fmt_ms(e2e["p50"]), fmt_ms(e2e["p99"]),
        )
    return t


def throughput_table(summary: dict[str, Any]) -> Table:
    gp = summary["overall"]["goodput"]
    slo = ", ".join(
        f"{k} ≤ {fmt_ms(v)} ms" for k, v in (("TTFT", gp["slo_ttft_s"]), ("TPOT", gp["slo_tpot_s"]))
        if v is not None
    ) or "no SLO given"
    t = Table(title=f"Throughput, goodput ({slo}), cost and tool calls", title_justify="left")
    for col in ("tier", "tok/s/user p50", "tok/s/user min", "out tok/s", "req/s", "goodput",
                "cost", "$/request", "tool calls ok"):
        t.add_column(col, justify="left" if col == "tier" else "right", no_wrap=col == "tier")
    for name, g in _rows(summary):
        if name == "all":
            t.add_section()
        tools = g["tool_calls"]
        valid = ("–" if tools["validity_rate"] is None
                 else f"{fmt_pct(tools['validity_rate'])} of {tools['calls']}")
        cost = g["cost_usd"]
        utps = g["user_tokens_per_s"]
        t.add_row(
            name, fmt_num(utps["p50"]), fmt_num(utps.get("min")),
            fmt_num(g["output_tokens_per_s"], 0), fmt_num(g["requests_per_s"], 2),
            fmt_pct(g["goodput"]["share"]), fmt_usd(cost["total"]), fmt_usd(cost["per_request"]),
            valid,
        )
    return t


def errors_table(summary: dict[str, Any]) -> Table | None:
    totals = summary["totals"]
    if not totals["errors"]:
        return None
    t = Table(title="Errors by kind (whole run)", title_justify="left")
    t.add_column("kind")
    t.add_column("count", justify="right")
    t.add_column("example")
    examples = totals.get("error_examples", {})
    for kind, n in totals["errors_by_kind"].items():
        t.add_row(kind, str(n), examples.get(kind, ""))
    return t


def compare_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="Measured vs simulated (fastmode simulate, same workload)",
              title_justify="left")
    for col in ("tier", "figure", "measured", "predicted", "difference", "relative"):
        t.add_column(col, justify="left" if col in ("tier", "figure") else "right")
    last = None
    for r in rows:
        is_time = "(s)" in r["figure"]
        fmt = (lambda v: fmt_ms(v) + " ms") if is_time else (
            fmt_usd if "$" in r["figure"] else lambda v: fmt_num(v, 1))
        rel, diff = r["relative_difference"], r.get("absolute_difference")
        if diff is None:
            dtext = "–"
        elif is_time:
            dtext = ("+" if diff >= 0 else "-") + fmt_ms(abs(diff)) + " ms"
        elif "$" in r["figure"]:
            dtext = ("+" if diff >= 0 else "-") + fmt_usd(abs(diff))
        else:
            dtext = f"{diff:+,.1f}"
        t.add_row(
            r["tier"] if r["tier"] != last else "", r["figure"].replace("(s)", "").strip(),
            "–" if r["measured"] is None else fmt(r["measured"]),
            "–" if r["predicted"] is None else fmt(r["predicted"]),
            dtext, "–" if rel is None else f"{100 * rel:+.1f}%",
        )
        last = r["tier"]
    return t


COMPARE_NOTE = (
    "[dim]One seed drives both: with a flag workload and one worker the bench sends the "
    "very requests the simulator runs (arrival times, tiers, lengths), so differences "
    "are the real serving path (HTTP, event loops, scheduling jitter). Warm-up/cool-down "
    "exclusions and --tools-share make the request sets differ.[/dim]"
)


def generator_lines(doc: dict[str, Any]) -> list[str]:
    """The request counts and the generator's self-check, then any warnings (rich markup)."""
    gen = doc["generator"]
    totals = doc["totals"]
    lag = gen.get("schedule_lag_p99_s")
    who = "generator" if gen.get("workers", 1) == 1 else (
        f"{gen['workers']} generator workers, the busiest at")
    line = (
        f"{totals['requests']} requests sent ({totals['ok']} ok, {totals['errors']} errors, "
        f"{totals['downgraded']} downgraded); {who} CPU {fmt_pct(gen['cpu_utilisation'])} "
        f"of one core"
    )
    if lag is not None:
        line += f", schedule lag p99 {fmt_ms(lag)} ms"
    lines = [line]
    if (gen.get("cpu_utilisation") or 0) > 0.8:
        lines.append("[yellow]warning: the load generator used >80% of a core; its timings "
                     "may include its own queueing[/yellow]")
    if gen.get("interrupted"):
        lines.append("[yellow]interrupted: in-flight requests were dropped[/yellow]")
    return lines


def report_renderables(
    doc: dict[str, Any], compare_rows: list[dict[str, Any]] | None = None
) -> list[RenderableType]:
    """The terminal report, in order: latency, throughput, errors, measured vs simulated, and
    the generator's line."""
    out: list[RenderableType] = [latency_table(doc), throughput_table(doc)]
    errs = errors_table(doc)
    if errs is not None:
        out.append(errs)
    if compare_rows:
        out += [compare_table(compare_rows), COMPARE_NOTE]
    return out + list(generator_lines(doc))
