"""Stored Chat Completions (``store: true``), driven with the official openai SDK as
its users call them: ``chat.completions.retrieve / update / list / delete`` and
``chat.completions.messages.list``, on both state backends (the SQLite file and a real Redis).

With auth on, a stored completion is its key's alone: another key gets the 404 of an unknown id
(retrieve, update, delete, messages) and does not see it listed, a request without a key is a
401, the admin key reads everyone's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import launch, stop_server
from test_redis_state import REDIS, redis_server
from test_tenancy import ADMIN_KEY, KEY_A, KEY_B, config

MODEL = "frontier-spark"


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def gateway(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A gateway with auth on (keys A and B, an admin key) on the given state backend."""
    tmp = tmp_path_factory.mktemp("chat-" + request.param)
    if request.param == "redis":
        assert REDIS is not None, "redis-server is not installed (apt-get install redis-server)"
        with redis_server(tmp) as url:
            proc, base = launch(config_text=config(tmp, url), tmp=tmp)
            try:
                yield {"url": base}
            finally:
                stop_server(proc)
    else:
        proc, base = launch(config_text=config(tmp), tmp=tmp)
        try:
            yield {"url": base}
        finally:
            stop_server(proc)


def sdk(base: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


def ask(c: openai.OpenAI, text: str, **kw: Any) -> Any:
    return c.chat.completions.create(model=kw.pop("model", MODEL), max_completion_tokens=6,
                                     messages=[{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": text}], **kw)


def test_store_retrieve_update_list_messages_delete(quick_server: str) -> None:
    c = sdk(quick_server)
    made = ask(c, "Name a colour.", store=True, metadata={"project": "paint", "run": "1"})
    got = c.chat.completions.retrieve(made.id)
    assert got.id == made.id and got.object == "chat.completion"
    assert got.choices[0].message.content == made.choices[0].message.content
    assert got.usage.completion_tokens == made.usage.completion_tokens
    assert got.metadata == {"project": "paint", "run": "1"}
    # the request's messages, each with an id, oldest first
    msgs = c.chat.completions.messages.list(made.id)
    assert [(m.role, m.content) for m in msgs.data] == [("system", "Be brief."),
                                                        ("user", "Name a colour.")]
    assert all(m.id for m in msgs.data) and msgs.has_more is False
    newest = c.chat.completions.messages.list(made.id, order="desc", limit=1)
    assert [m.content for m in newest.data] == ["Name a colour."] and newest.has_more
    # update replaces the metadata (and nothing else)
    updated = c.chat.completions.update(made.id, metadata={"project": "paint", "run": "2"})
    assert updated.metadata == {"project": "paint", "run": "2"}
    assert c.chat.completions.retrieve(made.id).metadata == {"project": "paint", "run": "2"}
    deleted = c.chat.completions.delete(made.id)
    assert deleted.deleted is True and deleted.id == made.id
    assert deleted.object == "chat.completion.deleted"
    for call in (lambda: c.chat.completions.retrieve(made.id),
                 lambda: c.chat.completions.messages.list(made.id),
                 lambda: c.chat.completions.delete(made.id)):
        with pytest.raises(openai.NotFoundError):
            call()


def test_only_stored_completions_are_kept_streamed_too(quick_server: str) -> None:
    c = sdk(quick_server)
    plain = ask(c, "Say hi.")
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.retrieve(plain.id)
    chunks = list(ask(c, "Say hi.", store=True, stream=True))
    cid = chunks[0].id
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert c.chat.completions.retrieve(cid).choices[0].message.content == text


def test_list_filters_and_pages(quick_server: str) -> None:
    c = sdk(quick_server)
    tag = {"suite": "list-" + ask(c, "x").id}  # a tag no other test uses
    ids = [ask(c, f"Question {i}", store=True, metadata=tag).id for i in range(3)]
    other = ask(c, "Question 3", store=True, model="frontier", metadata=tag).id
    listed = c.chat.completions.list(metadata=tag, model=MODEL)
    assert [x.id for x in listed.data] == ids  # oldest first, the other model left out
    assert [x.id for x in c.chat.completions.list(metadata=tag)] == ids + [other]
    # pages of 2, followed by the SDK's auto-pagination, and newest first
    page = c.chat.completions.list(metadata=tag, limit=2)
    assert [x.id for x in page.data] == ids[:2] and page.has_more is True
    assert [x.id for x in c.chat.completions.list(metadata=tag, limit=2)] == ids + [other]
    desc = c.chat.completions.list(metadata=tag, order="desc", limit=1)
    assert [x.id for x in desc.data] == [other]
    assert c.chat.completions.list(metadata={"suite": "nothing-here"}).data == []
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.list(limit=0)


def test_bad_metadata_is_a_400(quick_server: str) -> None:
    c = sdk(quick_server)
    with pytest.raises(openai.BadRequestError) as e:
        ask(c, "x", store=True, metadata={f"k{i}": "v" for i in range(17)})
    assert e.value.body["param"] == "metadata"
    made = ask(c, "x", store=True)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.update(made.id, metadata={"k": "v" * 513})


def test_a_stored_completion_is_its_keys_alone(gateway: dict[str, Any]) -> None:
    base = gateway["url"]
    a, b, admin = sdk(base, KEY_A), sdk(base, KEY_B), sdk(base, ADMIN_KEY)
    mine = ask(a, "My secret plan: tulips.", store=True, metadata={"who": "a"})
    theirs = ask(b, "Daffodils.", store=True, metadata={"who": "b"})
    assert a.chat.completions.retrieve(mine.id).id == mine.id
    assert [x.id for x in a.chat.completions.list(metadata={"who": "a"})] == [mine.id]
    # B neither sees A's completion nor learns that it exists
    assert [x.id for x in b.chat.completions.list()] == [theirs.id]
    for call in (lambda: b.chat.completions.retrieve(mine.id),
                 lambda: b.chat.completions.messages.list(mine.id),
                 lambda: b.chat.completions.update(mine.id, metadata={"who": "b"}),
                 lambda: b.chat.completions.delete(mine.id)):
        with pytest.raises(openai.NotFoundError) as e:
            call()
        assert e.value.body["code"] == "not_found" and "tulips" not in e.value.response.text
    for method, path in (("GET", f"/v1/chat/completions/{mine.id}"),
                         ("GET", "/v1/chat/completions"),
                         ("GET", f"/v1/chat/completions/{mine.id}/messages"),
                         ("DELETE", f"/v1/chat/completions/{mine.id}")):
        r = httpx.request(method, base + path, timeout=10)
        assert r.status_code == 401, (method, path, r.text)
        assert "tulips" not in r.text
    # nothing B did changed A's; the admin key reads everyone's
    assert a.chat.completions.retrieve(mine.id).metadata == {"who": "a"}
    assert {mine.id, theirs.id} <= {x.id for x in admin.chat.completions.list()}
    assert admin.chat.completions.retrieve(mine.id).id == mine.id
    a.chat.completions.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        a.chat.completions.retrieve(mine.id)

