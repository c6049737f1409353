"""The LoRA adapters an engine serves: vLLM's ``OpenAIServingModels.lora_requests``.

An adapter is a model id of its own: a request whose ``model`` names one is routed as its base
model's (``Router.adapters`` maps the name to the base model id) and runs on that deployment
with the adapter (``backends.lora``: the batch's adapter slots, the copy of a cold one, its
GEMMs). Adapters come from the deployment's ``[lora] modules`` (vLLM's ``--lora-modules``) at
start, and from ``POST /v1/load_lora_adapter`` at run time when the deployment allows it
(``runtime_updating``, vLLM's ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``); the int ids count up from
1 in load order, a reload in place keeps its id, as vLLM's do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fastmode.backends.engine import EngineSpec
from fastmode.backends.lora import MAX_ADAPTERS, LoraAdapter, LoraSpec, make_adapter
from fastmode.gateway.config import Config


class LoraError(Exception):
    """A load or unload vLLM refuses: ``status`` and vLLM's error ``type``."""

    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message


@dataclass(frozen=True)
class _Target:
    deployment: str
    base_model: str  # the model id adapters of this deployment adapt by default
    spec: LoraSpec


class LoraRegistry:
    def __init__(self, config: Config, spec: EngineSpec) -> None:
        self.spec = spec
        self.adapters: dict[str, tuple[str, LoraAdapter]] = {}  # name -> (deployment, adapter)
        self.bases: dict[str, str] = {}  # name -> base model id (the router reads it)
        self._targets: dict[str, _Target] = {}  # base model id -> where its adapters run
        self._next_id = 1
        self._served = set(config.routes)
        for name, dep in spec.deployments.items():
            if dep.lora is None:
                continue
            tiers = {t.name for t in spec.tiers.values() if t.deployment.name == name}
            models = [m for m, r in config.routes.items() if set(r.roles().values()) & tiers]
            for m in models:
                self._targets.setdefault(m, _Target(name, models[0], dep.lora))
            for mod in dep.lora.modules:
                base = mod.base_model or (models[0] if models else name)
                self.load(mod.name, mod.path, mod.rank, base)

    @property
    def enabled(self) -> bool:
        """Some deployment serves adapters (``--enable-lora``)."""
        return bool(self._targets)

    @property
    def runtime_updating(self) -> bool:
        return any(t.spec.runtime_updating for t in self._targets.values())

    def max_loras(self, deployment: str) -> int:
        lora = self.spec.deployments[deployment].lora
        return lora.max_loras if lora is not None else 0

    def get(self, model: str) -> LoraAdapter | None:
        entry = self.adapters.get(model)
        return entry[1] if entry is not None else None

    def on(self, deployment: str) -> Iterator[LoraAdapter]:
        """The adapters of ``deployment``, in load order."""
        return (a for d, a in self.adapters.values() if d == deployment)

    def load(self, name: str, path: str, rank: int | None = None, base: str | None = None,
             inplace: bool = False) -> LoraAdapter:
        """Register an adapter (vLLM's checks and messages); raises ``LoraError``."""
        if not name or not path:
            raise LoraError(400, "InvalidUserInput",
                            "Both 'lora_name' and 'lora_path' must be provided.")
        if name in self.adapters and not inplace:
            raise LoraError(400, "InvalidUserInput",
                            f"The lora adapter '{name}' has already been loaded. If you want "
                            "to load the adapter in place, set 'load_inplace' to True.")
        target = self._target(base)
        if name in self._served:
            raise LoraError(400, "InvalidUserInput",
                            f"The lora adapter '{name}' has the name of a served model.")
        if name not in self.adapters and len(self.adapters) >= MAX_ADAPTERS:
            raise LoraError(400, "InvalidUserInput",
                            f"At most {MAX_ADAPTERS} adapters can be registered; unload one.")
        max_rank = target.spec.max_lora_rank
        rank = max_rank if rank is None else rank
        if not 1 <= rank <= max_rank:
            raise LoraError(400, "BadRequestError",
                            f"LoRA rank {rank} is greater than max_lora_rank {max_rank}.")
        old = self.adapters.get(name)
        int_id = old[1].int_id if old is not None else self._next_id
        if old is None:
            self._next_id += 1
        placement = self.spec.deployments[target.deployment].placement
        adapter = make_adapter(placement, name, int_id, path, rank, base or target.base_model)
        self.adapters[name] = (target.deployment, adapter)
        self.bases[name] = adapter.base_model
        return adapter

    def unload(self, name: str) -> tuple[str, LoraAdapter]:
        """Unregister an adapter: (its deployment, the adapter); raises ``LoraError``."""
        if not name:
            raise LoraError(400, "InvalidUserInput",
                            "'lora_name' needs to be provided to unload a LoRA adapter.")
        entry = self.adapters.pop(name, None)
        if entry is None:
            raise LoraError(404, "NotFoundError",
                            f"The lora adapter '{name}' cannot be found.")
        self.bases.pop(name, None)
        return entry

    def _target(self, base: str | None) -> _Target:
        if base is None:
            if not self._targets:
                raise LoraError(400, "BadRequestError", "LoRA is not enabled (--enable-lora).")
            return next(iter(self._targets.values()))
        target = self._targets.get(base)
        if target is None:
            raise LoraError(400, "InvalidUserInput",
                            f"base_model_name: {base!r} is not a served model with LoRA on.")
        return target
