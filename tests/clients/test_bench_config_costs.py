"""``bench/config_costs.py``'s variants: each is a valid config that differs from the built-in one
in the part it is named for, and nowhere else. No server is started."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from bench.config_costs import builtin, parts, variants
from bench.pacing import PROMPT
from fastmode.backends.engine import build
from fastmode.backends.mockmodel.scripts import match_script
from fastmode.gateway.config import load_config


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """Every scalar (and list) of a TOML document by its dotted key."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_leaves(value, f"{prefix}.{key}" if prefix else key))
    return out


def _changed(text: str) -> set[str]:
    base, other = _leaves(builtin()), _leaves(tomllib.loads(text))
    return {k for k in base.keys() | other.keys() if base.get(k) != other.get(k)}


def test_each_part_changes_only_what_it_is_named_for() -> None:
    out = variants()
    assert _changed(out["built-in"]) == set()
    assert _changed(out["scripted"]) == {"scripts"}
    assert _changed(out["one-replica"]) == {
        "deployments.spark.replicas", "deployments.spark.max_batch",
        "deployments.spark.max_waiting", "fleet.policy"}
    assert _changed(out["tenants-1%"]) == {"tiers.spark.tenants.occupancy"}
    assert _changed(out["all three"]) == (_changed(out["scripted"]) | _changed(out["one-replica"])
                                          | _changed(out["tenants-1%"]))


def test_one_replica_holds_what_the_two_held() -> None:
    two = builtin()["deployments"]["spark"]
    one = tomllib.loads(variants()["one-replica"])["deployments"]["spark"]
    assert one["replicas"] == 1
    assert one["max_batch"] == two["max_batch"] * two["replicas"]
    assert one["max_waiting"] == two["max_waiting"] * two["replicas"]


@pytest.mark.parametrize("name", [*parts(""), "built-in", "all three", "bench config"])
def test_every_variant_is_a_config_the_gateway_loads(name: str, tmp_path: Path) -> None:
    path = tmp_path / "variant.toml"
    path.write_text(variants()[name])
    spec = build(load_config(path).sim())  # as `fastmode serve` builds its engine
    scripted = name in ("scripted", "all three", "bench config")
    # the benchmark's prompt gets the scripted reply exactly where the variant scripts it
    assert (match_script(spec.scripts, PROMPT) is not None) is scripted
