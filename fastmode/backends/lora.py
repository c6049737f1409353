"""LoRA adapters as a scheduling constraint: vLLM's ``--max-loras`` slots, with their physics.

A vLLM engine started with ``--enable-lora`` serves a request whose ``model`` names an adapter
on the base model plus that adapter's low-rank weights. Three things follow, and this module
models each for one replica (``LoraSlots``, kept by its ``Scheduler``):

- **a batch mixes at most ``max_loras`` adapters.** vLLM's scheduler (v1 ``Scheduler.schedule``)
  collects the adapters of the running requests; a waiting request for another adapter is
  passed over while that set is full, and requests behind it (the base model's, or a resident
  adapter's) go ahead. It joins once a running adapter's last request has left. Requests for
  the base model never wait on adapters;
- **a cold adapter costs its copy.** The GPU holds ``max_loras`` adapter slots; an adapter a
  step needs that is not in one is copied from host memory into the least recently used slot
  whose adapter no running request uses, before the step's forward pass (vLLM activates the
  batch's adapters at the start of the model's execution), so that step is longer by the
  adapter's bytes over the chip's host link (``backends.sleep.host_link_gbs``: PCIe Gen5 or
  NVLink-C2C), each chip copying its share. Adapters were read from disk into host memory
  when loaded (``--lora-modules`` at start, ``/v1/load_lora_adapter`` at run time): that read
  is not modeled;
- **an adapter adds its GEMMs to every step that runs it.** vLLM's LoRA kernels (shrink then
  expand, per adapted projection) work on weights padded to ``max_lora_rank``: every step
  reads the padded weights of each adapter in the batch and multiplies the LoRA requests'
  tokens by them, the larger of the read and the math on the roofline (HBM bandwidth x mbu,
  bf16 FLOP/s x mfu). It is small (a rank-16 adapter of an 8B model is ~27 MB: ~10 us a step
  on an H100).

An adapter's size: the four attention projections of every layer (q, k, v, o, the modules
most adapters are trained on), A (in x r) and B (r x out) each, in bf16:
``rank x (4 d_model + 2 heads x head_dim + 2 kv_heads x head_dim) x layers x 2`` bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fastmode.backends.perf import Placement
from fastmode.backends.sleep import host_link_gbs

LORA_DTYPE_BYTES = 2.0  # bf16 (vLLM's lora_dtype "auto": the activations' dtype)
DEFAULT_MAX_LORAS = 1  # vLLM's --max-loras default
DEFAULT_MAX_LORA_RANK = 16  # vLLM's --max-lora-rank default
MAX_ADAPTERS = 1024  # adapters an engine keeps registered (a client loads them at run time)


def adapter_params(placement: Placement, rank: int) -> float:
    """Parameters of a rank-``rank`` adapter on the four attention projections, all layers."""
    m = placement.model
    q_out = m.heads * m.head_dim
    kv_out = m.kv_heads * m.head_dim
    per_rank = 4 * m.d_model + 2 * q_out + 2 * kv_out  # (in + out) of q, k, v and o
    return float(rank * per_rank * m.layers)


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter an engine serves: vLLM's ``LoRARequest`` (name, int id, path) and its size."""

    name: str
    int_id: int  # vLLM's lora_int_id: 1, 2, ... in load order (KV events' lora_id)
    path: str  # where vLLM would read it; fastmode never reads it
    rank: int
    base_model: str  # the model id it adapts (``parent`` in /v1/models)
    weight_bytes: float  # its A and B matrices, all layers


@dataclass(frozen=True)
class LoraModule:
    """An adapter served from the start (vLLM's ``--lora-modules`` entry)."""

    name: str
    path: str
    rank: int | None = None  # None: max_lora_rank
    base_model: str | None = None  # None: the served model


@dataclass(frozen=True)
class LoraSpec:
    """A deployment's LoRA settings (vLLM's ``--max-loras``, ``--max-lora-rank``,
    ``--lora-modules`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``)."""

    max_loras: int = DEFAULT_MAX_LORAS
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK
    modules: tuple[LoraModule, ...] = ()
    runtime_updating: bool = False


def make_adapter(placement: Placement, name: str, int_id: int, path: str, rank: int,
                 base_model: str) -> LoraAdapter:
    """An adapter of ``rank`` on ``placement``'s model (its size from the model's shape)."""
    return LoraAdapter(name, int_id, path, rank, base_model,
                       adapter_params(placement, rank) * LORA_DTYPE_BYTES)


class LoraSlots:
    """One replica's adapter slots: which adapters its GPU holds, which its batch runs.

    The scheduler asks ``admits`` before admitting a waiting sequence, calls ``join`` when it
    does and ``leave`` when the sequence is gone (finished or cancelled), and adds
    ``step_seconds`` to each step. O(1) per call; nothing per step when no adapter runs."""

    __slots__ = ("spec", "placement", "resident", "running", "_joined", "_pending",
                 "loads", "load_seconds", "_gemm")

    def __init__(self, spec: LoraSpec, placement: Placement) -> None:
        self.spec = spec
        self.placement = placement
        self.resident: OrderedDict[str, LoraAdapter] = OrderedDict()  # GPU slots, LRU first
        self.running: dict[str, int] = {}  # adapter -> its admitted sequences (in join order)
        self._joined: set[int] = set()
        self._pending = 0.0  # copy seconds the next step pays
        self.loads = 0  # copies into a GPU slot so far
        self.load_seconds = 0.0  # ... and their modeled seconds
        self._gemm = _gemm_terms(spec, placement)

    @property
    def active(self) -> bool:
        """Some admitted sequence runs on an adapter (its steps have a term the closed-form
        decode line lacks)."""
        return bool(self.running)

    def admits(self, seq: Any) -> bool:
        """May ``seq`` join the batch now? vLLM's rule: the base model always; an adapter when
        the batch runs it already or runs fewer than ``max_loras`` adapters."""
        adapter: LoraAdapter | None = seq.lora
        if adapter is None:
            return True
        return adapter.name in self.running or len(self.running) < self.spec.max_loras

    def join(self, seq: Any) -> None:
        """``seq`` was admitted: its adapter runs (copied into a slot first when cold)."""
        adapter: LoraAdapter | None = seq.lora
        if adapter is None or seq.id in self._joined:
            return
        self._joined.add(seq.id)
        self.running[adapter.name] = self.running.get(adapter.name, 0) + 1
        if adapter.name in self.resident:
            self.resident.move_to_end(adapter.name)
            return
        if len(self.resident) >= self.spec.max_loras:
            for name in self.resident:  # the least recently used one no request runs
                if name not in self.running:
                    del self.resident[name]
                    break
        self.resident[adapter.name] = adapter
        seconds = copy_seconds(self.placement, adapter)
        self._pending += seconds
        self.loads += 1
        self.load_seconds += seconds

    def leave(self, seq: Any) -> None:
        """``seq`` left the batch: its adapter stays resident, and stops running with its
        last sequence."""
        if seq.id not in self._joined:
            return
        self._joined.discard(seq.id)
        name = seq.lora.name
        n = self.running[name] - 1
        if n:
            self.running[name] = n
        else:
            del self.running[name]

    def forget(self, name: str) -> None:
        """The adapter was unloaded: its slot frees once no sequence runs it."""
        if name not in self.running:
            self.resident.pop(name, None)

    def step_seconds(self, chunks: Sequence[tuple[Any, int]], prefilling: Iterable[Any]) -> float:
        """What the adapters add to the step about to run: the copies of cold adapters joined
        since the last step, and the LoRA GEMMs of its tokens on adapters (one per decoding
        sequence of an adapter, its prompt chunk for a prefilling one: ``chunks``)."""
        extra, self._pending = self._pending, 0.0
        prefills = sum(1 for s in prefilling if s.lora is not None)
        lora_tokens = sum(self.running.values()) - prefills + sum(
            c for s, c in chunks if s.lora is not None)
        if lora_tokens > 0 and self.running:
            read_s, flop_s = self._gemm
            extra += max(read_s * len(self.running), flop_s * lora_tokens)
        return extra


def copy_seconds(placement: Placement, adapter: LoraAdapter) -> float:
    """An adapter from host memory into a GPU slot: each chip copies its share over its host
    link, the chips in parallel."""
    per_chip = adapter.weight_bytes / placement.chips
    return per_chip / (host_link_gbs(placement.hardware.name) * 1e9)


def _gemm_terms(spec: LoraSpec, placement: Placement) -> tuple[float, float]:
    """(seconds to read one adapter's padded weights, seconds of LoRA math per token) on one
    chip of ``placement``: its share of the ``max_lora_rank`` buffers."""
    hw = placement.hardware
    padded = adapter_params(placement, spec.max_lora_rank) / placement.chips
    read_s = padded * LORA_DTYPE_BYTES / (hw.memory_bandwidth_tbs * 1e12 * hw.mbu)
    flop_s = 2.0 * padded / (hw.peak_flops("bf16") * hw.mfu)
    return read_s, flop_s


__all__ = ["DEFAULT_MAX_LORAS", "DEFAULT_MAX_LORA_RANK", "LoraAdapter", "LoraModule", "LoraSlots",
           "LoraSpec", "MAX_ADAPTERS", "adapter_params", "copy_seconds", "make_adapter"]
