"""The per-tier families kept as plain numbers (gateway.tier_metrics) expose exactly what
prometheus_client's own Counter and Histogram exposed for the same requests."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fastmode.gateway.observe.metrics import LATENCY_BUCKETS, Metrics

# (tier, status, prompt, cached, output, cost, ttft, itl): requests as settlement records them
REQUESTS = [
    ("standard", 200, 120, 0, 16, 0.0021, 0.031, 0.0154),
    ("standard", 200, 80, 64, 300, 0.0113, 0.0005, 0.0153),  # on a bucket's bound: le
    ("fast", 200, 90, 0, 40, 0.0180, 0.062, None),
    ("fast", 429, 0, 0, 0, 0.0, None, None),
    ("spark", 499, 10, 0, 3, 0.0001, 75.0, 0.0009),  # past the last bound: +Inf only
]


def _reference() -> str:
    """The same requests through prometheus_client's Counter / Histogram, as before."""
    r = CollectorRegistry()
    requests = Counter("fastmode_requests", "Requests by tier and HTTP status",
                       ["tier", "status"], registry=r)
    counters = [Counter(n, d, ["tier"], registry=r) for n, d in (
        ("fastmode_prompt_tokens", "Prompt tokens billed, by tier"),
        ("fastmode_cached_prompt_tokens", "Cached prompt tokens, by tier"),
        ("fastmode_output_tokens", "Output tokens billed, by tier"),
        ("fastmode_cost_usd", "Dollars billed, by tier"))]
    ttft = Histogram("fastmode_ttft_seconds", "Modeled time to first token", ["tier"],
                     buckets=LATENCY_BUCKETS, registry=r)
    itl = Histogram("fastmode_itl_seconds", "Modeled mean inter-token latency, one sample per "
                    "request", ["tier"], buckets=LATENCY_BUCKETS, registry=r)
    for tier, status, *amounts, t, i in REQUESTS:
        requests.labels(tier, str(status)).inc()
        children = [c.labels(tier) for c in counters]
        ttft_child, itl_child = ttft.labels(tier), itl.labels(tier)
        for child, amount in zip(children, amounts, strict=True):
            if amount:
                child.inc(amount)
        if t is not None:
            ttft_child.observe(t)
        if i is not None:
            itl_child.observe(i)
    return generate_latest(r).decode()


def _samples(text: str, names: set[str]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the named families; ``_created`` timestamps only as present (they are
    wall-clock times)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name not in names:
            continue
        for s in fam.samples:
            value = 1.0 if s.name.endswith("_created") else s.value
            out[(s.name, tuple(sorted(s.labels.items())))] = value
    return out


def test_the_exposition_is_what_prometheus_client_wrote() -> None:
    metrics = Metrics(lambda: [])
    for tier, status, prompt, cached, output, cost, ttft, itl in REQUESTS:
        metrics.record(tier, status, prompt, cached, output, cost, ttft, itl)
    ours = generate_latest(metrics.registry).decode()
    names = {"fastmode_requests", "fastmode_prompt_tokens", "fastmode_cached_prompt_tokens",
             "fastmode_output_tokens", "fastmode_cost_usd", "fastmode_ttft_seconds",
             "fastmode_itl_seconds"}
    want = _samples(_reference(), names)
    got = _samples(ours, names)
    assert set(got) == set(want)
    for key, value in want.items():
        assert abs(got[key] - value) < 1e-12, key
    # the families keep their types and help texts
    types = {f.name: (f.type, f.documentation) for f in text_string_to_metric_families(ours)}
    ref = {f.name: (f.type, f.documentation)
           for f in text_string_to_metric_families(_reference())}
    assert {n: types[n] for n in names} == {n: ref[n] for n in names}


def test_a_family_reads_alone_for_the_dashboard() -> None:
    metrics = Metrics(lambda: [])
    metrics.record("fast", 200, 10, 0, 5, 0.5, 0.01, 0.002)
    metrics.record("fast", 200, 10, 0, 7, 0.25, 0.02, 0.003)
    (fam,) = list(metrics.output_tokens.collect())
    assert fam.name == "fastmode_output_tokens"
    assert [(s.name, s.labels, s.value) for s in fam.samples if s.name.endswith("_total")] == [
        ("fastmode_output_tokens_total", {"tier": "fast"}, 12.0)]
    (hist,) = list(metrics.ttft.collect())
    count = [s.value for s in hist.samples if s.name == "fastmode_ttft_seconds_count"]
    assert count == [2.0]
