"""A config file is laid over the built-in default (a three-line override failed
with ``deployments: Field required``; one more model id meant copying ~260 lines), and a
complete config means what it meant before overlays: it brings its own topology."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import get_args

import anthropic
import httpx
import openai
import pytest
from anthropic.types import ModelParam
from conftest import ROOT, launch, stop_server
from openai.types import ChatModel
from test_overload import SMALL_QUEUE

from fastmode.gateway.config import Config, ConfigError, default_config_text, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "user.toml"
    path.write_text(text)
    return path


def alone(text: str) -> Config:
    """What a file meant when it replaced the default (before overlays)."""
    return Config.model_validate(tomllib.loads(text))


def test_a_three_line_file_is_a_whole_config(tmp_path) -> None:
    config = load_config(write(tmp_path, "[server]\nport = 9000\nfast_overflow = 'downgrade'\n"))
    default = load_config()
    assert (config.server.port, config.server.fast_overflow) == (9000, "downgrade")
    # everything else is the default's
    assert config.model_dump(exclude={"server"}) == default.model_dump(exclude={"server"})
    assert config.server.retry_after_s == default.server.retry_after_s


def test_the_default_laid_over_itself_is_the_default(tmp_path) -> None:
    assert load_config(write(tmp_path, default_config_text())) == load_config()


@pytest.mark.parametrize("source", ["deploy/gateway-remote.toml",
                                    "examples/fast-hypotheses.toml", "SMALL_QUEUE"])
def test_a_complete_config_brings_its_own_topology(tmp_path, source: str) -> None:
    """Files that define [deployments] mean what they meant alone: none of the default's pools,
    tiers, routes (aliases included), fleet or behaviors leak in."""
    text = SMALL_QUEUE if source == "SMALL_QUEUE" else (ROOT / source).read_text()
    assert load_config(write(tmp_path, text)) == alone(text)


def test_a_route_or_a_tier_setting_extends_the_default(tmp_path) -> None:
    config = load_config(write(tmp_path, """
[routes.my-model]
standard = "spark"
[tiers.spark.quality]
tool_error_rate = 0.5
"""))
    default = load_config()
    assert list(config.routes) == [*default.routes, "my-model"]
    quality = config.tiers["spark"].quality
    assert quality.tool_error_rate == 0.5  # set here...
    assert quality.structured_error_rate == default.tiers["spark"].quality.structured_error_rate
    assert config.tiers["spark"].tenants == default.tiers["spark"].tenants  # ...the rest kept


def test_replace_takes_tables_from_the_file_alone(tmp_path) -> None:
    config = load_config(write(tmp_path, """
replace = ["routes", "tiers.spark.quality"]
[routes.only]
standard = "standard"
[tiers.spark.quality]
tool_error_rate = 0.5
"""))
    assert list(config.routes) == ["only"]
    assert config.tiers["spark"].quality.structured_error_rate == 0.0  # not inherited
    assert config.tiers["spark"].tenants == load_config().tiers["spark"].tenants
    whole = "replace = true\n" + SMALL_QUEUE
    assert load_config(write(tmp_path, whole)) == alone(SMALL_QUEUE)


def test_merge_adds_a_pool_to_the_default_topology(tmp_path) -> None:
    config = load_config(write(tmp_path, """
merge = ["deployments", "tiers", "routes", "fleet"]
[deployments.big]
model = "frontier"
hardware = "b200"
chips = 8
precision = "fp8"
replicas = 1
max_batch = 1024
[tiers.bulk]
deployment = "big"
[routes.frontier]
bulk = "bulk"
[fleet.nodes.b200]
count = 13
"""))
    default = load_config()
    assert set(config.deployments) == {*default.deployments, "big"}
    assert config.routes["frontier"].roles() == {**default.routes["frontier"].roles(),
                                                 "bulk": "bulk"}
    assert config.fleet is not None and config.fleet.policy == default.fleet.policy


@pytest.mark.parametrize(("text", "says"), [
    ('replace = "routes"\n', "replace: a list of table names"),
    ('replace = ["rutes"]\n', "replace: unknown table 'rutes'"),
    ('merge = ["server"]\n', "merge: unknown table 'server'"),
    ('replace = ["routes"]\n[server]\nport = 1\n', "config: routes: Field required"),
])
def test_bad_overlay_keys_are_one_line_errors(tmp_path, text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("[", r"\[")):
        load_config(write(tmp_path, text))


# -- aliases: the ids frameworks ask for, served ---------------------------------------------

OPENAI_IDS = ["gpt-4o", "gpt-4o-2024-08-06", "gpt-4.1", "o3", "gpt-5.1", "gpt-5.4", "gpt-5.5"]
OPENAI_SMALL = ["gpt-4o-mini", "gpt-4.1-mini", "gpt-4.1-nano", "o4-mini", "gpt-5-mini",
                "gpt-5-nano", "gpt-5.4-mini", "gpt-5.4-nano"]
ANTHROPIC_IDS = ["claude-opus-4-5", "claude-opus-4-5-20251101",
                 "claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "claude-sonnet-4-6",
                 "claude-sonnet-5", "claude-sonnet-5-5"]
ANTHROPIC_SMALL = ["claude-haiku-4-5", "claude-haiku-4-5-20251001", "claude-haiku-5-5"]


def test_aliases_map_to_the_tiers_of_the_model_they_stand_for() -> None:
    routes = load_config().routes
    for model in OPENAI_IDS:  # frontier's standard, fast and flex (its ultrafast is its own)
        assert routes[model].roles() == {
            r: t for r, t in routes["frontier"].roles().items() if r != "ultrafast"}, model
    for model in ANTHROPIC_IDS:
        assert routes[model].roles() == {"standard": "standard", "fast": "fast"}, model
    for model in OPENAI_SMALL + ANTHROPIC_SMALL:
        assert routes[model].roles() == routes["frontier-spark"].roles(), model
    # every alias is a model id the provider's SDK knows (its Literal of model ids)
    known = set(get_args(ChatModel)) | set(get_args(get_args(ModelParam)[0]))
    assert set(OPENAI_IDS + OPENAI_SMALL + ANTHROPIC_IDS + ANTHROPIC_SMALL) <= known
    # (the price-era aliases and gpt-oss-120b are routes of their own: test_price_eras.py)
    assert set(OPENAI_IDS + OPENAI_SMALL + ANTHROPIC_IDS + ANTHROPIC_SMALL) <= set(routes)


def test_a_three_line_config_serves_the_aliases_with_the_sdks(tmp_path) -> None:
    proc, url = launch(config_text="[server]\nfast_overflow = \"downgrade\"\n", tmp=tmp_path)
    try:
        models = {m.id for m in openai.OpenAI(base_url=url + "/v1", api_key="x").models.list()}
        assert {"frontier", *OPENAI_IDS, *ANTHROPIC_IDS} <= models
        raw = openai.OpenAI(base_url=url + "/v1", api_key="x").chat.completions.with_raw_response
        r = raw.create(model="gpt-4o", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert r.headers["x-fastmode-tier"] == "standard" and r.parse().model == "gpt-4o"
        small = raw.create(model="gpt-4o-mini", max_tokens=5,
                           messages=[{"role": "user", "content": "hi"}])
        assert small.headers["x-fastmode-tier"] == "spark"
        ant = anthropic.Anthropic(base_url=url, api_key="x").messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert ant.headers["x-fastmode-tier"] == "standard"
        assert ant.parse().model == "claude-sonnet-4-6"
        assert httpx.get(url + "/v1/models/claude-haiku-4-5").json()["id"] == "claude-haiku-4-5"
    finally:
        stop_server(proc)
