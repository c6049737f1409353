"""``vllm:lora_requests_info``: the gauge LoRA-aware routers read to find an engine's adapters.

vLLM (v1/metrics/loggers.py) keeps one gauge with the labels ``max_lora`` (``--max-loras``),
``running_lora_adapters`` and ``waiting_lora_adapters`` (comma-separated adapter names of the
requests running / waiting) and sets the series of the current label values to the wall-clock
time at every update; the series of past values stay exposed with their older times, so a
reader takes the series with the largest value (the Gateway API Inference Extension's endpoint
picker does: its LoRA-affinity scorer prefers an engine already running the request's adapter,
then one with fewer than ``max_lora`` running). No ``model_name`` or ``engine`` label, as in
vLLM: with several data-parallel ranks the names are the union over the ranks.

Here the labels are read from the replicas' schedulers at scrape time (``backends.lora``: the
adapters of the admitted sequences, then those of the waiting queue, in order of first
appearance) and their series set to ``time.time()``; the last ``HISTORY`` label sets are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client.utils import floatToGoString

from fastmode.gateway.pipeline.admission import Gateway

NAME = "vllm:lora_requests_info"
HELP = "Running stats on lora requests."
HISTORY = 64  # past label sets kept exposed (prometheus_client would keep every one)


class LoraInfo:
    def __init__(self, gateway: Gateway, clock: Callable[[], float] = time.time) -> None:
        self.gateway = gateway
        self.clock = clock
        self.series: dict[tuple[str, str, str], float] = {}  # (max, waiting, running) -> time

    def labels(self) -> list[tuple[str, str, str]]:
        """The current (max_lora, waiting, running) of each LoRA deployment."""
        out = []
        for dep in self.gateway.deployments.values():
            spec = dep.spec.lora
            if spec is None:
                continue
            running: dict[str, None] = {}
            waiting: dict[str, None] = {}
            for replica in dep.replicas:
                sched = replica.scheduler
                if sched.lora is not None:
                    running.update(dict.fromkeys(sched.lora.running))
                for seq in sched.waiting:
                    if seq.lora is not None:
                        waiting[seq.lora.name] = None
            out.append((str(spec.max_loras), ",".join(waiting), ",".join(running)))
        return out

    def render(self) -> bytes:
        now = self.clock()
        for key in self.labels():
            self.series.pop(key, None)
            self.series[key] = now  # the newest last
        while len(self.series) > HISTORY:
            del self.series[next(iter(self.series))]
        lines = [f"# HELP {NAME} {HELP}\n# TYPE {NAME} gauge\n"]
        for (max_lora, waiting, running), value in self.series.items():
            text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
            lines.append(f'{NAME}{{max_lora="{max_lora}",waiting_lora_adapters='
                         f'"{_escape(waiting)}",running_lora_adapters="{_escape(running)}"}} '
                         f'{text}\n')  # vLLM's label order
        return "".join(lines).encode()


def _escape(value: str) -> str:
    """A label value as the exposition quotes it (adapter names are a client's to pick)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def install(gateway: Gateway) -> LoraInfo | None:
    """Expose the gauge when some in-process deployment serves adapters."""
    if not any(d.spec.lora is not None for d in gateway.deployments.values()):
        return None
    info = LoraInfo(gateway)
    gateway.metrics.rendered.append(info)
    return info
