"""A deployment's vLLM engine features beyond the batch: LoRA adapters and KV transfer (P/D).

``[deployments.NAME.lora]`` is vLLM's ``--enable-lora`` with ``--max-loras``,
``--max-lora-rank`` and ``--lora-modules``; ``[deployments.NAME.kv_transfer]`` is vLLM's
``--kv-transfer-config`` (a KV connector such as NIXL, for prefill/decode disaggregation across
engines). ``fastmode engine`` maps the same flags onto these tables (fastmode/cli/engine.py);
docs/engine-vllm.md describes what each does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# vLLM's accepted --max-lora-rank values (LoRAConfig's possible_max_ranks)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoraModuleConfig(_Strict):
    """One adapter served from the start (vLLM's ``--lora-modules`` entry)."""

    name: str = Field(min_length=1, max_length=256)
    path: str = Field(min_length=1, max_length=4096)  # never read: fastmode has no weights
    base_model_name: str | None = Field(None, max_length=256)  # None: the served model
    # vLLM reads the rank from the adapter's adapter_config.json; fastmode has no file, so it
    # is given here (None: max_lora_rank)
    rank: int | None = Field(None, ge=1, le=512)


class LoraConfig(_Strict):
    """vLLM's LoRA engine arguments (their defaults)."""

    enable_lora: bool = True  # the table's presence turns LoRA on (vLLM: --enable-lora)
    max_loras: int = Field(1, ge=1, le=256)  # adapters one batch may mix (GPU slots)
    max_lora_rank: int = 16  # the slots' rank: every adapter's weights are padded to it
    # POST /v1/load_lora_adapter and /v1/unload_lora_adapter exist (vLLM: the environment
    # variable VLLM_ALLOW_RUNTIME_LORA_UPDATING, which `fastmode engine` also reads)
    runtime_updating: bool = False
    modules: list[LoraModuleConfig] = Field(default_factory=list, max_length=1024)

    @model_validator(mode="after")
    def _ranks(self) -> LoraConfig:
        if self.max_lora_rank not in LORA_RANKS:
            raise ValueError(f"max_lora_rank: must be one of {', '.join(map(str, LORA_RANKS))}"
                             f", got {self.max_lora_rank}")
        names = [m.name for m in self.modules]
        if len(set(names)) != len(names):
            raise ValueError("modules: two adapters share a name")
        for m in self.modules:
            if m.rank is not None and m.rank > self.max_lora_rank:
                raise ValueError(f"modules.{m.name}.rank: {m.rank} is greater than "
                                 f"max_lora_rank {self.max_lora_rank}")
        return self


class KVTransferConfig(BaseModel):
    """vLLM's ``--kv-transfer-config``: the fields fastmode reads, the others accepted and
    ignored (``kv_buffer_device``, ``kv_ip``, ...), as a vLLM pod spec passes them."""

    model_config = ConfigDict(extra="ignore")

    kv_connector: str | None = Field(None, max_length=256)  # e.g. "NixlConnector"
    kv_role: Literal["kv_producer", "kv_consumer", "kv_both"] | None = None
    engine_id: str | None = Field(None, max_length=256)  # None: a fresh id per process, as vLLM
    kv_connector_extra_config: dict[str, Any] = Field(default_factory=dict)
    # fastmode's: the sender's link per chip, GB/s (None: the hardware profile's, as
    # fastmode/backends/disagg.py picks it: NVLink within a scale-up domain, else the scale-out NIC)
    link_gbs: float | None = Field(None, gt=0)
    # where the prefill engine says its KV is (vLLM: VLLM_NIXL_SIDE_CHANNEL_HOST / _PORT)
    side_channel_host: str = Field("localhost", max_length=256)
    side_channel_port: int = Field(5600, ge=1, le=65535)

    @property
    def on(self) -> bool:
        return self.kv_connector is not None


__all__ = ["KVTransferConfig", "LORA_RANKS", "LoraConfig", "LoraModuleConfig"]
