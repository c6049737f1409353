"""``fastmode engine``'s LoRA and KV-transfer flags, read as ``vllm serve`` reads them.

``--enable-lora``, ``--lora-modules`` (``name=path`` or vLLM's JSON form ``{"name", "path",
"base_model_name"}``, fastmode's ``rank`` beside them), ``--max-loras``, ``--max-lora-rank``
and ``--kv-transfer-config JSON`` become the deployment's ``lora`` and ``kv_transfer`` tables
(fastmode/backends/config_vllm.py); ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` in the environment turns the
run-time load and unload routes on, as it does for vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from fastmode.gateway.config import ConfigError

RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def register(v: argparse._ArgumentGroup) -> None:
    v.add_argument("--enable-lora", action="store_true", default=None,
                   help="serve LoRA adapters: a request whose model names one runs on it")
    v.add_argument("--lora-modules", nargs="+", metavar="MODULE",
                   help="adapters served from the start: name=path, or JSON "
                        '\'{"name": "sql", "path": "/adapters/sql", "base_model_name": '
                        '"MODEL", "rank": 8}\' (rank: fastmode\'s; default --max-lora-rank)')
    v.add_argument("--max-loras", type=int,
                   help="adapters one batch may mix; a request for another one waits (1)")
    v.add_argument("--max-lora-rank", type=int,
                   help="rank of the adapter slots: 1, 8, 16, 32, 64, 128, 256, 320, 512 (16)")
    v.add_argument("--kv-transfer-config", metavar="JSON",
                   help='KV connector for P/D, as vLLM: \'{"kv_connector": "NixlConnector", '
                        '"kv_role": "kv_both"}\' (fastmode\'s "link_gbs": the link per chip)')


def lora_module(text: str) -> dict[str, Any]:
    """One ``--lora-modules`` value as a ``[lora] modules`` entry."""
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--lora-modules: not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ConfigError("--lora-modules: a JSON module must be an object")
        return value
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"--lora-modules: {text!r} is neither name=path nor a JSON object")
    return {"name": name, "path": path}


def updates(args: argparse.Namespace, current: Mapping[str, Any],
            environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The deployment fields these flags set: ``lora`` and ``kv_transfer`` (``current``: the
    deployment's fields as set in the config)."""
    out: dict[str, Any] = {}
    lora: dict[str, Any] = dict(current.get("lora") or {})
    given = False
    if getattr(args, "enable_lora", None):
        lora["enable_lora"] = given = True
    for flag in ("max_loras", "max_lora_rank"):
        value = getattr(args, flag, None)
        if value is not None:
            lora[flag] = value
            given = True
    modules = getattr(args, "lora_modules", None)
    if modules:
        lora["modules"] = [lora_module(m) for m in modules]
        given = True
    if environ.get(RUNTIME_LORA_ENV, "0").strip().lower() in ("1", "true") and (
            given or lora):
        lora["runtime_updating"] = True
    if given or (lora and lora != current.get("lora")):
        out["lora"] = lora
    raw = getattr(args, "kv_transfer_config", None)
    if raw is not None:
        try:
            out["kv_transfer"] = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--kv-transfer-config: not valid JSON: {exc}") from None
    return out
