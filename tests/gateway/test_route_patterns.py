"""Model ids by pattern: the coding agents' current ids route as named, the next release's by
the first matching ``[[route_patterns]]`` glob, served and billed as the route it names."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fastmode.backends.engine import build
from fastmode.gateway.config import Config, ConfigError, default_config_text, load_config
from fastmode.gateway.errors import APIError
from fastmode.gateway.pipeline.routing import Router

# every default and built-in id of Claude Code 2.1.197 and Codex CLI 0.171.0, and its tier
CLI_IDS = {
    "claude-opus-4-8": "standard", "claude-sonnet-5": "standard", "claude-opus-4-6": "standard",
    "claude-opus-4-7": "standard", "claude-haiku-4-5": "spark", "claude-mythos-5": "standard",
    "gpt-6.2-sol": "standard", "gpt-6.2-astra": "standard", "gpt-6.1-sol": "standard",
    "gpt-6.1-terra": "standard", "gpt-6-sol": "standard", "gpt-6-luna": "spark",
    "gpt-6-astra": "standard", "gpt-5.6-sol": "standard", "gpt-5.6-terra": "standard",
    "gpt-5.6-luna": "spark", "gpt-5.5": "standard", "gpt-5.4": "standard",
    "gpt-5.3-codex": "standard", "gpt-5.3-codex-spark": "spark", "gpt-5.2": "standard",
}  # fmt: skip


@pytest.fixture(scope="module")
def router() -> Router:
    config = load_config()
    return Router(config, build(config.sim()))


@pytest.mark.parametrize("model", sorted(CLI_IDS))
def test_every_cli_id_is_served_by_name(router: Router, model: str) -> None:
    assert model in router.config.routes
    assert router.route(model).tier.name == CLI_IDS[model]


@pytest.mark.parametrize(("model", "like"), [
    ("claude-opus-6", "claude-opus-5"), ("claude-haiku-6-1", "claude-haiku-4-5"),
    ("gpt-7-sol", "gpt-6.2-sol"), ("gpt-7-luna", "gpt-5.6-luna"), ("gpt-7-mini", "gpt-5-mini"),
    ("gpt-6.3-codex-spark", "frontier-spark"), ("o5-pro", "o3"),
])  # fmt: skip
def test_an_unnamed_id_is_served_as_its_first_matching_pattern(
        router: Router, model: str, like: str) -> None:
    assert router.config.route_of(model) == like
    routed, named = router.route(model, "fast"), router.route(like, "fast")
    assert routed.tier is named.tier and routed.role == named.role
    assert routed.pricing == named.pricing  # billed as the route it is served as


def test_an_id_no_pattern_matches_is_404(router: Router) -> None:
    with pytest.raises(APIError) as e:
        router.route("no-such-model")
    assert e.value.status == 404 and e.value.code == "model_not_found"


def test_a_pattern_must_name_a_route() -> None:
    raw = tomllib.loads(default_config_text())
    raw["route_patterns"] = [{"match": "x-*", "like": "nowhere"}]
    with pytest.raises(ValueError, match=r"route_patterns\[0\].like"):
        Config.model_validate(raw)


def test_replacing_routes_drops_the_default_patterns(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('replace = ["routes"]\n[routes.mine]\nstandard = "standard"\n')
    config = load_config(path)
    assert config.route_patterns == [] and config.route_of("claude-opus-6") is None
    path.write_text('replace = ["routes"]\n[routes.mine]\nstandard = "standard"\n'
                    '[[route_patterns]]\nmatch = "m-*"\nlike = "mine"\n')
    assert load_config(path).route_of("m-1") == "mine"
    path.write_text('[[route_patterns]]\nmatch = "m-*"\nlike = "mine"\n')
    with pytest.raises(ConfigError, match="like"):
        load_config(path)
