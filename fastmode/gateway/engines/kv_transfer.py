"""Prefill/decode disaggregation across engines: vLLM's NIXL connector's ``kv_transfer_params``.

An engine with a KV connector (``--kv-transfer-config '{"kv_connector": "NixlConnector",
"kv_role": "kv_both"}'``; ``[deployments.NAME.kv_transfer]``) takes part in the exchange
llm-d's routing sidecar and vLLM's disaggregated proxy run on ``/v1/completions`` and
``/v1/chat/completions``:

1. the proxy sends the request to a prefill engine with ``max_tokens: 1`` and
   ``kv_transfer_params: {"do_remote_decode": true, ...}``. That engine prefills as any
   request and, when the reply stopped at its cap (vLLM: only a length-capped finish hands its
   KV over), answers with ``kv_transfer_params``: ``do_remote_prefill: true``,
   ``do_remote_decode: false``, ``remote_block_ids`` (one id per full block of the prompt, the
   blocks a decoder reads), ``remote_engine_id``, ``remote_request_id``, ``remote_host``,
   ``remote_port`` (vLLM's side channel, ``side_channel_host`` / ``_port``) and ``tp_size``;
2. the proxy sends the original request with those params to a decode engine. It skips the
   prefill of the blocks it reads: once admitted (KV reserved) the request waits for their KV
   to cross the link (``perf_modes.kv_transfer_seconds``: KV bytes per token of the model x
   the blocks' tokens, over NVLink inside a scale-up domain, else the scale-out NIC per chip of
   the sender's ``tp_size``; ``link_gbs`` overrides the bandwidth), then computes the prompt's
   remaining tokens (at least its last one, as vLLM recomputes it) in one step, whose end is
   its first token: its TTFT is the transfer plus that step. Its answer carries
   ``kv_transfer_params: null``.

Without a connector the params are ignored, as vLLM ignores them. Streamed replies carry no
params (the proxies prefill without streaming). The block ids are this engine's own count
(fastmode keeps blocks as hashes, not at addresses); a decoder treats them as opaque.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from fastmode.backends.engine import DeploymentSpec
from fastmode.backends.perf_modes import kv_transfer_seconds
from fastmode.gateway.errors import bad_request

MAX_TP = 1024  # the largest tp_size a decoder accepts from a prefill engine's params
DEFAULT_BLOCK = 16  # vLLM's block size, for a deployment whose cache is not in blocks


@dataclass(frozen=True)
class RemotePrefill:
    """A decode request's prompt KV from a prefill engine: how many tokens, how long."""

    tokens: int
    seconds: float


def _block_size(dep: DeploymentSpec) -> int:
    return dep.kv_blocks.block_size if dep.kv_blocks is not None else DEFAULT_BLOCK


def _flag(params: dict[str, Any], key: str) -> bool:
    value = params.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"kv_transfer_params.{key}: must be a boolean.",
                          param=f"kv_transfer_params.{key}")
    return value


class KVTransfer:
    """One engine process's side of the exchange: its engine id and its block ids."""

    def __init__(self) -> None:
        self._engine_ids: dict[str, str] = {}  # deployment -> engine id (vLLM: a uuid)
        self._next_block = 0

    def engine_id(self, dep: DeploymentSpec) -> str:
        cfg = dep.kv_transfer
        if cfg is not None and cfg.engine_id:
            return cfg.engine_id
        return self._engine_ids.setdefault(dep.name, str(uuid.uuid4()))

    def remote_prefill(self, params: dict[str, Any] | None, dep: DeploymentSpec,
                       prompt_tokens: int) -> RemotePrefill | None:
        """A decode request's transfer, or None (no connector, or not ``do_remote_prefill``);
        a 400 for params a prefill engine would not have sent."""
        if params is None or dep.kv_transfer is None or not dep.kv_transfer.on:
            return None
        decode, prefill = _flag(params, "do_remote_decode"), _flag(params, "do_remote_prefill")
        if decode and prefill:
            raise bad_request("kv_transfer_params: do_remote_decode and do_remote_prefill "
                              "cannot both be set.", param="kv_transfer_params")
        if not prefill:
            return None
        bs = _block_size(dep)
        ids = params.get("remote_block_ids")
        limit = -(-dep.placement.model.context_window // bs)
        if (not isinstance(ids, list) or len(ids) > limit
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                           for i in ids)):
            raise bad_request(f"kv_transfer_params.remote_block_ids: must be a list of at most "
                              f"{limit} non-negative block ids.",
                              param="kv_transfer_params.remote_block_ids")
        tp = params.get("tp_size", 1)
        if not isinstance(tp, int) or isinstance(tp, bool) or not 1 <= tp <= MAX_TP:
            raise bad_request(f"kv_transfer_params.tp_size: must be an integer from 1 to "
                              f"{MAX_TP}.", param="kv_transfer_params.tp_size")
        tokens = min(len(ids) * bs, prompt_tokens - 1)
        if tokens <= 0:  # a prompt shorter than a block: nothing to read, computed here
            return None
        seconds = kv_transfer_seconds(dep.placement, tp, tokens, dep.kv_transfer.link_gbs)
        return RemotePrefill(tokens, seconds)

    def hands_over(self, params: dict[str, Any] | None, dep: DeploymentSpec) -> bool:
        """Is this a prefill request whose KV a decode engine will read?"""
        if params is None or dep.kv_transfer is None or not dep.kv_transfer.on:
            return False
        return _flag(params, "do_remote_decode") and not _flag(params, "do_remote_prefill")

    def prefill_params(self, dep: DeploymentSpec, request_id: str,
                       prompt_tokens: int) -> dict[str, Any]:
        """What a prefill engine answers: where the decoder reads the prompt's full blocks."""
        cfg = dep.kv_transfer
        assert cfg is not None
        n = prompt_tokens // _block_size(dep)
        start, self._next_block = self._next_block, self._next_block + n
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": list(range(start, start + n)),
            "remote_engine_id": self.engine_id(dep),
            "remote_request_id": request_id,
            "remote_host": cfg.side_channel_host,
            "remote_port": cfg.side_channel_port,
            "tp_size": dep.placement.chips,
        }
