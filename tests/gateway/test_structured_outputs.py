"""Structured outputs through the official SDKs against a real server: ``parse()`` with nested
pydantic models (Chat and Responses), ``json_object``, patterns and formats, 400s that name
the keyword, strict tools, Anthropic's ``output_config.format``.

What is served is checked, not how fast: the server is ``quick_server`` (the default config on a
faster B200 node, so the standard tier's replies of hundreds of tokens take a fraction of a
second instead of several)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import uuid
from typing import Literal

import anthropic
import openai
import pytest
from jsonschema import Draft202012Validator
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from fastmode.backends.mockmodel import validate_arguments


class Address(BaseModel):
    street: str
    city: str
    zip: str = Field(pattern=r"^\d{5}$")


class Contact(BaseModel):
    name: str
    email: str = Field(json_schema_extra={"format": "email"})
    born: datetime.date
    last_seen: datetime.datetime
    kind: Literal["customer", "partner", "vendor"]
    age: int = Field(ge=18, le=99)
    score: float = Field(ge=0, le=1)
    address: Address
    previous: list[Address]
    nickname: str | None
    device_id: uuid.UUID
    ip: ipaddress.IPv4Address


class Node(BaseModel):
    label: str
    children: list[Node]


USER = [{"role": "user", "content": "Invent a customer who lives in Lisbon."}]


def oa(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x")


@pytest.mark.parametrize("model", ["frontier", "frontier-spark"])
def test_chat_parse_nested_models(quick_server: str, model: str) -> None:
    schema = to_strict_json_schema(Contact)
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    ok = 0
    seeds = 8
    for seed in range(seeds):
        try:
            completion = oa(quick_server).chat.completions.parse(
                model=model, messages=USER, response_format=Contact, seed=seed,
                max_completion_tokens=1500)
        except Exception:  # noqa: BLE001 - the spark tier's botch rate (2%) may bite
            assert model == "frontier-spark"
            continue
        message = completion.choices[0].message
        assert isinstance(message.parsed, Contact)
        assert list(validator.iter_errors(json.loads(message.content))) == []
        assert message.parsed.address.city == "Lisbon"
        ok += 1
    assert ok >= seeds - 2


def test_chat_parse_streams_and_recursive_models(quick_server: str) -> None:
    with oa(quick_server).chat.completions.stream(
            model="frontier", messages=[{"role": "user", "content": "A tree of topics"}],
            response_format=Node, seed=5, max_completion_tokens=2000) as stream:
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Node)


def test_a_cut_structured_output_is_a_length_error(quick_server: str) -> None:
    with pytest.raises(openai.LengthFinishReasonError):
        oa(quick_server).chat.completions.parse(
            model="frontier", messages=USER, response_format=Contact, seed=1,
            max_completion_tokens=10)


def test_responses_parse(quick_server: str) -> None:
    resp = oa(quick_server).responses.parse(
        model="frontier", input="Invent a customer who lives in Lisbon.", text_format=Contact,
        max_output_tokens=1500)
    assert isinstance(resp.output_parsed, Contact)
    assert resp.text.format.type == "json_schema" and resp.text.format.name == "Contact"
    with oa(quick_server).responses.stream(
            model="frontier", input="A tree of topics", text_format=Node,
            max_output_tokens=2000) as stream:
        assert isinstance(stream.get_final_response().output_parsed, Node)


def test_json_object_mode(quick_server: str) -> None:
    resp = oa(quick_server).chat.completions.create(
        model="frontier", messages=[{"role": "user", "content": "Answer in JSON: why batch?"}],
        response_format={"type": "json_object"}, max_completion_tokens=800)
    assert isinstance(json.loads(resp.choices[0].message.content), dict)
    out = oa(quick_server).responses.create(
        model="frontier", input="Reply with a JSON object about caching",
        text={"format": {"type": "json_object"}}, max_output_tokens=800)
    assert isinstance(json.loads(out.output_text), dict)
    with pytest.raises(openai.BadRequestError, match="must contain the word 'json'"):
        oa(quick_server).chat.completions.create(
            model="frontier", messages=USER, response_format={"type": "json_object"})


PATTERNED = {
    "type": "object",
    "properties": {
        "order": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
        "plate": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}-[A-Z]{2}$"},
        "when": {"type": "string", "format": "date-time"},
        "window": {"type": "string", "format": "duration"},
        "host": {"type": "string", "format": "hostname"},
        "v6": {"type": "string", "format": "ipv6"},
    },
    "required": ["order", "plate", "when", "window", "host", "v6"],
    "additionalProperties": False,
}


def test_pattern_and_format_fields_validate(quick_server: str) -> None:
    validator = Draft202012Validator(PATTERNED,
                                     format_checker=Draft202012Validator.FORMAT_CHECKER)
    for seed in range(4):
        resp = oa(quick_server).chat.completions.create(
            model="frontier", messages=USER, seed=seed, max_completion_tokens=600,
            response_format={"type": "json_schema", "json_schema": {
                "name": "order", "schema": PATTERNED, "strict": True}})
        value = json.loads(resp.choices[0].message.content)
        assert list(validator.iter_errors(value)) == []
        datetime.datetime.fromisoformat(value["when"])
        ipaddress.IPv6Address(value["v6"])


def test_strict_tool_arguments_follow_patterns(quick_server: str) -> None:
    tool = {"type": "function", "function": {
        "name": "track_order", "description": "Track an order", "strict": True,
        "parameters": PATTERNED}}
    # the issue: 14 of 20 standard-tier calls failed on a pattern (40 seeds are checked in
    # tests/backends/test_structured.py; a few here, through the SDK)
    for seed in range(8):
        resp = oa(quick_server).chat.completions.create(
            model="frontier", messages=[{"role": "user", "content": "Track my order"}],
            tools=[tool], tool_choice="required", seed=seed, parallel_tool_calls=False)
        call = resp.choices[0].message.tool_calls[0]
        assert validate_arguments(PATTERNED, call.function.arguments, strict=True) == []


@pytest.mark.parametrize("schema,needle", [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
     "'additionalProperties' is required to be supplied and to be false"),
    ({"type": "object", "properties": {"a": {"type": "object", "patternProperties": {}}},
      "required": ["a"], "additionalProperties": False},
     "In context=('properties', 'a'), 'patternProperties' is not permitted"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "isbn"}},
      "required": ["a"], "additionalProperties": False}, "format 'isbn' is not permitted"),
])
def test_schemas_outside_the_subset_are_a_400_naming_the_keyword(quick_server, schema,
                                                                  needle) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oa(quick_server).chat.completions.create(
            model="frontier", messages=USER, response_format={
                "type": "json_schema", "json_schema": {"name": "thing", "schema": schema,
                                                       "strict": True}})
    assert needle in info.value.message
    assert "response_format 'thing'" in info.value.message
    assert info.value.body["param"] == "response_format.json_schema.schema"
    with pytest.raises(openai.BadRequestError) as info:
        oa(quick_server).responses.create(
            model="frontier", input="x", text={"format": {
                "type": "json_schema", "name": "thing", "schema": schema, "strict": True}})
    assert needle in info.value.message and info.value.body["param"] == "text.format.schema"
    with pytest.raises(openai.BadRequestError, match="function 'f'"):
        oa(quick_server).chat.completions.create(model="frontier", messages=USER, tools=[{
            "type": "function", "function": {"name": "f", "parameters": schema,
                                             "strict": True}}])


def test_anthropic_structured_output(quick_server: str) -> None:
    client = anthropic.Anthropic(base_url=quick_server, api_key="x")
    msg = client.messages.parse(model="frontier", max_tokens=1500, messages=USER,
                                output_format=Contact)
    assert isinstance(msg.parsed_output, Contact)
    with pytest.raises(anthropic.BadRequestError, match="'not' is not permitted"):
        client.messages.create(model="frontier", max_tokens=100, messages=USER,
                               output_config={"format": {"type": "json_schema", "schema": {
                                   "type": "object", "properties": {"a": {"not": {}}}}}})


def test_langchain_with_structured_output(quick_server: str) -> None:
    """LangChain's default ``with_structured_output()`` (json_schema) and its tool-calling
    method, as agent code uses them."""
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="frontier", base_url=quick_server + "/v1", api_key="x",
                     max_retries=0, timeout=60)
    for method in ("json_schema", "function_calling"):
        out = llm.with_structured_output(Address, method=method).invoke(
            "Where does the customer in Lisbon live?")
        assert isinstance(out, Address) and out.city == "Lisbon"
