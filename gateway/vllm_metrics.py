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

from backends.drivers import RealtimeReplica
from backends.scheduler import Scheduler, StepResult

from .tier_metrics import Hist

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

    def stepped(self, result: StepResult) -> None:
        if result.decode_tokens:
            self.itl.observe(result.end - result.start, result.decode_tokens)
        self.generation += result.decode_tokens + len(result.first_tokens)
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

    def attach(self, deployment: str, model: str, replicas: list[RealtimeReplica]) -> None:
        for i, replica in enumerate(replicas):
            engine = _Engine(replica, model, str(i))
            self.engines.append((deployment, engine))
            previous = replica.on_step

            def on_step(rep: RealtimeReplica, result: StepResult, engine: _Engine = engine,
                        previous: Any = previous) -> None:
                if previous is not None:
                    previous(rep, result)
                engine.stepped(result)

            replica.on_step = on_step

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        many = len({d for d, _ in self.engines}) > 1
        names = ["model_name", "engine"] + (["deployment"] if many else [])

        def labels(dep: str, e: _Engine) -> list[str]:
            return e.labels + ([dep] if many else [])

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=names)

        def counter(name: str, doc: str, extra: list[str] | None = None) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=names + (extra or []))

        running = gauge("vllm:num_requests_running", "Number of requests in model execution "
                        "batches (the modeled other tenants included).")
        waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be "
                        "processed.")
        kv = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine "
                                 "CacheConfig", labels=["block_size", "num_gpu_blocks", "engine"]
                                 + (["deployment"] if many else []))
        prompt = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        gen = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of "
                          "number of queried tokens.")
        hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of "
                       "cached tokens.")
        success = counter("vllm:request_success", "Count of successfully processed requests.",
                          ["finished_reason"])
        hists = {
            "ttft": ("vllm:time_to_first_token_seconds", "Histogram of time to first token in "
                     "seconds."),
            "itl": ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in "
                    "seconds."),
            "e2e": ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in "
                    "seconds."),
            "queue": ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING "
                      "phase for request."),
            "prefill": ("vllm:request_prefill_time_seconds", "Histogram of time spent in "
                        "PREFILL phase for request."),
            "decode": ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE "
                       "phase for request."),
            "inference": ("vllm:request_inference_time_seconds", "Histogram of time spent in "
                          "RUNNING phase for request."),
        }
        families = {k: HistogramMetricFamily(n, d, labels=names) for k, (n, d) in hists.items()}
        for dep, e in self.engines:
            lab = labels(dep, e)
            sched: Scheduler = e.replica.scheduler
            running.add_metric(lab, sched.running + sched.background.seqs)
            waiting.add_metric(lab, len(sched.waiting))
            kv.add_metric(lab, sched.kv_used_tokens / sched.kv_capacity)
            info.add_metric([str(BLOCK_SIZE), str(sched.kv_capacity // BLOCK_SIZE), lab[1]]
                            + lab[2:], 1.0)
            prompt.add_metric(lab, e.prompt)
            gen.add_metric(lab, e.generation)
            queries.add_metric(lab, e.cache_queries)
            hits.add_metric(lab, e.cache_hits)
            for reason, n in e.success.items():
                success.add_metric([*lab, reason], n)
            for key, fam in families.items():
                h: Hist = getattr(e, key)
                fam.add_metric(lab, h.buckets(), h.sum)
        yield from (running, waiting, kv, info, prompt, gen, queries, hits, success)
        yield from families.values()


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
    gateway.metrics.registry.register(vm)
    return vm
