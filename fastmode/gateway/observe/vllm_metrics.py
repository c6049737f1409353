"""vLLM-compatible Prometheus metrics: a fastmode engine looks like a vLLM pod to its tooling.

vLLM's Grafana dashboards and the Kubernetes Gateway API Inference Extension's endpoint picker
read ``vllm:num_requests_waiting``, ``vllm:num_requests_running`` and
``vllm:kv_cache_usage_perc`` (and, optionally, ``vllm:cache_config_info``'s ``block_size`` /
``num_gpu_blocks``); dashboards also plot the token counters and the latency histograms. This
module exposes them with vLLM's names, types, label names (``model_name``, ``engine``) and
histogram buckets (vllm/v1/metrics/loggers.py), from the simulated engine:

- gauges are read from each replica's scheduler at scrape time (nothing on the hot path). As in
  a real vLLM pod, the batch includes the other tenants' sequences (the modeled background):
  ``num_requests_running`` counts them and ``kv_cache_usage_perc`` includes their KV;
- counters and histograms are fed once per replica step (the driver's ``on_step``), from the
  scheduler's own modeled times: prompt tokens when a prefill completes, generation tokens per
  step, inter-token latency as (step duration x decoders), and at a request's end its e2e /
  queue / prefill / decode times and ``request_success_total{finished_reason}``. No per-token
  work: the custom histograms below add a whole step's decoders in one bucket update.

``engine`` is the replica's index within its deployment (vLLM's data-parallel engine index); a
gateway running several deployments in-process adds a ``deployment`` label so the series stay
distinct. Prefix-cache counters count the prompt tokens that arrived already cached (a
``previous_response_id`` continuation) as hits.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.utils import floatToGoString

from fastmode.backends.drivers import RealtimeReplica
from fastmode.backends.scheduler import Scheduler, StepResult
from fastmode.gateway.observe.tier_metrics import Hist

# vLLM's buckets (vllm/v1/metrics/loggers.py), so that dashboards' quantiles read the same
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
BLOCK_SIZE = 16  # vLLM's default KV block size, in tokens
FINISHED_REASONS = ("stop", "length")  # aborted requests are not counted (no event)


class _Engine:
    """The counters of one replica (one vLLM engine)."""

    def __init__(self, replica: RealtimeReplica, model: str, index: str) -> None:
        self.replica = replica
        self.labels = [model, index]
        self.prompt = 0
        self.generation = 0
        self.cache_queries = 0
        self.cache_hits = 0
        self.success = dict.fromkeys(FINISHED_REASONS, 0)
        self.ttft = Hist(TTFT_BUCKETS)
        self.itl = Hist(ITL_BUCKETS)
        self.e2e = Hist(REQUEST_BUCKETS)
        self.queue = Hist(REQUEST_BUCKETS)
        self.prefill = Hist(REQUEST_BUCKETS)
        self.decode = Hist(REQUEST_BUCKETS)
        self.inference = Hist(REQUEST_BUCKETS)

    def gauges(self) -> tuple[int, int, float]:
        """running (the other tenants' sequences included), waiting, KV use: read now."""
        sched: Scheduler = self.replica.scheduler
        return (sched.running + sched.background.seqs, len(sched.waiting),
                sched.kv_used_tokens / sched.kv_capacity)

    @property
    def preemptions(self) -> int:
        """Requests its scheduler preempted (KV ran out: ``backends.kv_paging``), read now."""
        return self.replica.scheduler.preemptions

    def blocks(self) -> int:
        return self.replica.scheduler.kv_capacity // BLOCK_SIZE

    def stepped(self, result: StepResult) -> None:
        if result.decode_tokens:
            self.itl.observe(result.end - result.start, result.decode_tokens)
        for seq in result.resumed:  # its first token after a preemption: the whole pause
            self.itl.observe(result.end - seq.paused_at, 1)
        self.generation += result.decode_tokens + len(result.first_tokens) + len(result.resumed)
        for seq in result.first_tokens:
            self.prompt += seq.prompt_tokens
            self.cache_queries += seq.prompt_tokens
            self.cache_hits += seq.cached_tokens
            self.ttft.observe(seq.first_token_at - seq.arrival)
        if result.finished:
            self._finished(result.finished)

    def _finished(self, seqs: list[Any]) -> None:
        """A request's e2e / queue / prefill / decode / inference times: the five histograms
        share vLLM's request buckets, so each value is one bisect and no call."""
        at, bounds = bisect.bisect_left, REQUEST_BUCKETS
        hists = (self.e2e, self.queue, self.prefill, self.decode, self.inference)
        for seq in seqs:
            self.success[_reason(seq)] += 1
            arrival, first, end = seq.arrival, seq.first_token_at, seq.finished_at
            admitted = seq.admitted_at if seq.admitted_at >= 0 else arrival
            for h, v in zip(hists, (end - arrival, admitted - arrival, first - admitted,
                                    end - first, end - admitted), strict=True):
                h.counts[at(bounds, v)] += 1
                h.sum += v


def _reason(seq: Any) -> str:
    """``length`` when the reply stopped at its cap, else ``stop``: read from the job the
    gateway tagged the engine's token stream with, when it did."""
    job = getattr(getattr(seq, "tag", None), "tag", None)
    gen = getattr(job, "gen", None)
    return "length" if getattr(gen, "finish_reason", None) == "length" else "stop"


class VllmMetrics:
    """Hooks every replica's ``on_step`` and exposes the vLLM families at scrape time."""

    def __init__(self) -> None:
        self.engines: list[tuple[str, _Engine]] = []  # (deployment, engine)
        self._lines: list[_Lines] | None = None  # ``render``'s text up to the values
        self._lines_many = False

    def attach(self, deployment: str, model: str, replicas: list[RealtimeReplica]) -> None:
        for i, replica in enumerate(replicas):
            engine = _Engine(replica, model, str(i))
            self.engines.append((deployment, engine))
            self._lines = None
            previous = replica.on_step

            def on_step(rep: RealtimeReplica, result: StepResult, engine: _Engine = engine,
                        previous: Any = previous) -> None:
                if previous is not None:
                    previous(rep, result)
                engine.stepped(result)

            replica.on_step = on_step

    def describe(self) -> list[Any]:
        return []

    def _names(self) -> tuple[bool, list[str]]:
        many = len({d for d, _ in self.engines}) > 1
        return many, ["model_name", "engine"] + (["deployment"] if many else [])

    def collect(self) -> Iterator[Any]:
        """The families through prometheus_client's own types: the reference ``render`` is
        tested against (``generate_latest`` of this is ``render``'s text, byte for byte)."""
        many, names = self._names()
        gauges = [GaugeMetricFamily(n, d, labels=names) for _, n, d in GAUGES]
        info = GaugeMetricFamily(INFO[0], INFO[1], labels=["block_size", "num_gpu_blocks",
                                                           "engine"] + names[2:])
        counters = [CounterMetricFamily(n, d, labels=names) for _, n, d in COUNTERS]
        success = CounterMetricFamily(SUCCESS[0], SUCCESS[1], labels=[*names, "finished_reason"])
        hists = [HistogramMetricFamily(n, d, labels=names) for _, n, d in HISTS]
        for dep, e in self.engines:
            lab = e.labels + ([dep] if many else [])
            for gauge, v in zip(gauges, e.gauges(), strict=True):
                gauge.add_metric(lab, v)
            info.add_metric([str(BLOCK_SIZE), str(e.blocks()), lab[1]] + lab[2:], 1.0)
            for counter, (key, _, _) in zip(counters, COUNTERS, strict=True):
                counter.add_metric(lab, getattr(e, key))
            for reason, n in e.success.items():
                success.add_metric([*lab, reason], n)
            for hist, (key, _, _) in zip(hists, HISTS, strict=True):
                h: Hist = getattr(e, key)
                hist.add_metric(lab, h.buckets(), h.sum)
        yield from (*gauges, info, *counters, success, *hists)

    def render(self) -> bytes:
        """``generate_latest``'s text of ``collect``, written from cached label strings.

        Each engine's ~170 series have fixed names and labels, so their text up to the value
        is made once (``_Lines``); a scrape writes the values. prometheus_client builds a
        family object per scrape and validates, escapes and sorts every sample's labels: 22 ms
        per scrape of the default config's 16 engines (2,672 of its 3,090 lines are these),
        during which the event loop, and so every stream, stood still (the host-lag metric
        counted each scrape as a slip). ``tests/gateway/test_vllm_metrics.py`` checks the two
        texts are equal."""
        many, _ = self._names()
        if self._lines is None or self._lines_many != many:
            self._lines = [_Lines(e, dep if many else None) for dep, e in self.engines]
            self._lines_many = many
        lines = self._lines
        now = [e.gauges() for _, e in self.engines]
        out: list[str] = []
        for i, (_, name, doc) in enumerate(GAUGES):
            out.append(_head(name, doc, "gauge"))
            out += [f"{ln.gauges[i]}{_num(v[i])}\n" for ln, v in zip(lines, now, strict=True)]
        out.append(_head(INFO[0], INFO[1], "gauge"))
        out += [f"{ln.info}1.0\n" for ln in lines]
        for i, (key, name, doc) in enumerate(COUNTERS):
            out.append(_head(f"{name}_total", doc, "counter"))
            out += [f"{ln.counters[i]}{_num(getattr(e, key))}\n"
                    for ln, (_, e) in zip(lines, self.engines, strict=True)]
        out.append(_head(f"{SUCCESS[0]}_total", SUCCESS[1], "counter"))
        for ln, (_, e) in zip(lines, self.engines, strict=True):
            out += [f"{ln.success[r]}{_num(n)}\n" for r, n in e.success.items()]
        for i, (key, name, doc) in enumerate(HISTS):
            out.append(_head(name, doc, "histogram"))
            for ln, (_, e) in zip(lines, self.engines, strict=True):
                h: Hist = getattr(e, key)
                buckets, count, total = ln.hists[i]
                acc = 0
                for prefix, c in zip(buckets, h.counts, strict=True):
                    acc += c
                    out.append(f"{prefix}{_num(acc)}\n")
                out.append(f"{count}{_num(acc)}\n{total}{_num(h.sum)}\n")
        return "".join(out).encode()


# the families, in the order they are written: (key, name, help); a counter's or histogram's
# key is its ``_Engine`` attribute, the gauges are ``_Engine.gauges()`` in this order
GAUGES = (
    ("running", "vllm:num_requests_running", "Number of requests in model execution batches "
     "(the modeled other tenants included)."),
    ("waiting", "vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("kv", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)
INFO = ("vllm:cache_config_info", "Information of the LLMEngine CacheConfig")
COUNTERS = (
    ("prompt", "vllm:prompt_tokens", "Number of prefill tokens processed."),
    ("generation", "vllm:generation_tokens", "Number of generation tokens processed."),
    ("cache_queries", "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number "
     "of queried tokens."),
    ("cache_hits", "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
     "tokens."),
    ("preemptions", "vllm:num_preemptions", "Cumulative number of preemption from the engine."),
)
SUCCESS = ("vllm:request_success", "Count of successfully processed requests.")
HISTS = (
    ("ttft", "vllm:time_to_first_token_seconds", "Histogram of time to first token in "
     "seconds."),
    ("itl", "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    ("e2e", "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    ("queue", "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for "
     "request."),
    ("prefill", "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase "
     "for request."),
    ("decode", "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for "
     "request."),
    ("inference", "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING "
     "phase for request."),
)


def _escape(value: str) -> str:
    """A label value as the exposition quotes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _head(name: str, doc: str, kind: str) -> str:
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def _num(value: float) -> str:
    """``floatToGoString``'s text; an integer count below 10^6 (most) without its call."""
    if type(value) is int and 0 <= value < 1_000_000:
        return f"{value}.0"
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


class _Lines:
    """One engine's samples up to their value: ``name{labels} ``, labels sorted by name."""

    def __init__(self, e: _Engine, deployment: str | None) -> None:
        mine = {"engine": e.labels[1]} if deployment is None else {
            "engine": e.labels[1], "deployment": deployment}

        def line(name: str, **labels: str) -> str:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            return f"{name}{{{text}}} "

        def sample(name: str, **extra: str) -> str:
            return line(name, model_name=e.labels[0], **mine, **extra)

        self.gauges = [sample(name) for _, name, _ in GAUGES]
        self.info = line(INFO[0], block_size=str(BLOCK_SIZE), num_gpu_blocks=str(e.blocks()),
                         **mine)
        self.counters = [sample(f"{name}_total") for _, name, _ in COUNTERS]
        self.success = {r: sample(f"{SUCCESS[0]}_total", finished_reason=r)
                        for r in FINISHED_REASONS}
        self.hists = []
        for key, name, _ in HISTS:
            h: Hist = getattr(e, key)
            les = [*(repr(float(b)) for b in h.bounds), "+Inf"]
            self.hists.append(([sample(f"{name}_bucket", le=le) for le in les],
                               sample(f"{name}_count"), sample(f"{name}_sum")))


def install(gateway: Any, remote_tiers: set[str] | None = None) -> VllmMetrics:
    """Attach to the gateway's in-process deployments (after ``Gateway.start``) and register
    on its registry. Deployments whose every tier is served remotely are skipped: their engines
    export their own. ``model_name`` is the first model routed to the deployment."""
    remote_tiers = remote_tiers or set()
    vm = VllmMetrics()
    config = gateway.config
    for name, dep in gateway.deployments.items():
        tiers = {t.name for t in gateway.spec.tiers.values() if t.deployment.name == name}
        if tiers and tiers <= remote_tiers:
            continue
        models = [m for m, r in config.routes.items() if set(r.roles().values()) & set(tiers)]
        model = models[0] if models else config.deployments[name].model
        vm.attach(name, model, dep.replicas)
    gateway.metrics.rendered.append(vm)  # written by ``render``, not through the registry
    return vm
