"""``/v1/models`` in Anthropic's shape for the anthropic SDK, OpenAI's for the rest.

Driven with the official anthropic SDK as its users call it: ``models.list()`` (and its
auto-pagination over ``after_id`` / ``before_id``), ``models.retrieve()``, and an unknown id as
the SDK's ``NotFoundError`` with Anthropic's error body. The openai SDK on the same path keeps
OpenAI's shape.
"""

from __future__ import annotations

from datetime import datetime

import anthropic
import httpx
import openai
import pytest

from fastmode.backends.engine import build
from fastmode.gateway.config import load_config

MODELS = list(load_config().routes)  # every model the built-in config routes, in its order


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)


def test_list_and_retrieve_in_anthropics_shape(quick_server: str) -> None:
    page = client(quick_server).models.list(limit=100)  # one page (Anthropic's default: 20)
    assert [m.id for m in page.data] == MODELS
    assert page.first_id == MODELS[0] and page.last_id == MODELS[-1] and page.has_more is False
    for m in page.data:
        assert m.type == "model" and m.display_name
        assert isinstance(m.created_at, datetime) and m.created_at.tzinfo is not None
    spark = client(quick_server).models.retrieve("frontier-spark")
    assert spark.id == "frontier-spark" and spark.type == "model"
    assert spark.max_input_tokens == build(load_config().sim()).tiers["spark"].context_window


def test_paging_follows_the_cursors(quick_server: str) -> None:
    c = client(quick_server)
    first = c.models.list(limit=1)
    assert [m.id for m in first.data] == MODELS[:1] and first.has_more is True
    # the SDK's auto-pagination walks every page with after_id
    assert [m.id for m in c.models.list(limit=1)] == MODELS
    after = c.models.list(limit=1, after_id=MODELS[0])
    assert [m.id for m in after.data] == MODELS[1:2]
    before = c.models.list(limit=1, before_id=MODELS[-1])
    assert [m.id for m in before.data] == MODELS[-2:-1]
    assert before.has_more is (len(MODELS) > 2)
    assert c.models.list(after_id=MODELS[-1]).data == []


def test_unknown_ids_are_anthropic_errors(quick_server: str) -> None:
    c = client(quick_server)
    with pytest.raises(anthropic.NotFoundError) as e:
        c.models.retrieve("no-such-model")
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        c.models.list(after_id="no-such-model")
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        c.models.list(limit=0)


def test_openai_clients_keep_openais_shape(quick_server: str) -> None:
    oa = openai.OpenAI(base_url=quick_server + "/v1", api_key="x", max_retries=0)
    assert [m.id for m in oa.models.list()] == MODELS
    card = httpx.get(quick_server + "/v1/models/frontier", timeout=10).json()
    assert card["object"] == "model" and "type" not in card
    with pytest.raises(openai.NotFoundError) as e:
        oa.models.retrieve("nope")
    assert e.value.body["code"] == "model_not_found"
