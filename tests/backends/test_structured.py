"""Structured outputs in the mock model: values that fit a schema (validated by ``jsonschema``),
the supported subset, plausible and reproducible values, bounded generation."""

from __future__ import annotations

import datetime
import ipaddress
import json
import random
import re
import time
import uuid

import pytest
from jsonschema import Draft202012Validator

from fastmode.backends.mockmodel import (
    GenerationRequest,
    QualityProfile,
    ResponseFormat,
    SchemaRejected,
    ToolSpec,
    check_schema,
    generate,
    generate_value,
    validate_arguments,
    validate_value,
)
from fastmode.backends.mockmodel.structured import JSON_OBJECT_SCHEMA
from fastmode.backends.tokenizer import tokenize

ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "zip": {"type": "string", "pattern": r"^\d{5}$"},
    },
    "required": ["street", "city", "zip"],
    "additionalProperties": False,
}
PERSON = {
    "$defs": {"Address": ADDRESS},
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
        "kind": {"type": "string", "enum": ["customer", "partner"]},
        "version": {"const": 2},
        "address": {"$ref": "#/$defs/Address"},
        "others": {"type": "array", "items": {"$ref": "#/$defs/Address"}, "maxItems": 3},
        "nick": {"anyOf": [{"type": "string", "maxLength": 12}, {"type": "null"}]},
        "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "level": {"type": "integer", "multipleOf": 5, "minimum": 10, "maximum": 50},
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 5},
    },
    "required": ["name", "age", "email", "born", "kind", "version", "address", "others", "nick",
                 "score", "level", "sku", "tags"],
    "additionalProperties": False,
}
TREE = {  # recursive through $ref, as pydantic writes `children: list[Tree]`
    "$defs": {"Node": {
        "type": "object",
        "properties": {"label": {"type": "string"},
                       "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                       "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}},
        "required": ["label", "children", "parent"], "additionalProperties": False}},
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/Node"}},
    "required": ["root"], "additionalProperties": False,
}
FORMATS = {
    "type": "object",
    "properties": {f: {"type": "string", "format": f} for f in (
        "date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")},
    "additionalProperties": False,
}
FORMATS["required"] = list(FORMATS["properties"])
USER = [{"role": "user", "content": "Describe a customer from Lisbon as JSON"}]


def structured(schema, seed: int = 1, max_tokens: int | None = 2000, **kw):
    fmt = ResponseFormat("json_schema", schema, "x", True)
    return generate(GenerationRequest(USER, max_tokens=max_tokens, seed=seed,
                                      response_format=fmt, **kw), **_quality(kw))


def _quality(kw):
    return {}


def formats_ok(value: dict[str, str]) -> None:
    """Each documented format, checked with the standard library."""
    datetime.datetime.fromisoformat(value["date-time"].replace("Z", "+00:00"))
    datetime.date.fromisoformat(value["date"])
    datetime.time.fromisoformat(value["time"].replace("Z", "+00:00"))
    assert re.fullmatch(r"P(\d+D)?(T(\d+H)?(\d+M)?(\d+S)?)?", value["duration"])
    assert value["duration"] not in ("P", "PT")
    assert re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+", value["email"])
    assert re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+)+", value["hostname"])
    ipaddress.IPv4Address(value["ipv4"])
    ipaddress.IPv6Address(value["ipv6"])
    uuid.UUID(value["uuid"])


@pytest.mark.parametrize("schema", [PERSON, TREE, FORMATS, JSON_OBJECT_SCHEMA])
def test_structured_replies_validate_over_many_seeds(schema) -> None:
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    for seed in range(40):
        g = structured(schema, seed)
        assert g.finish_reason == "stop"
        value = json.loads(g.text)
        assert list(validator.iter_errors(value)) == [], (seed, g.text)
        assert validate_value(schema, value, strict=True) == []
        assert "".join(p.text for p in g.pieces) == g.text == "".join(tokenize(g.text))
        if schema is FORMATS:
            formats_ok(value)


def test_values_are_plausible_and_echo_the_user() -> None:
    value = json.loads(structured(PERSON, 3).text)
    first, last = value["name"].split()
    assert first[0].isupper() and last[0].isupper()
    assert re.fullmatch(r"\d{5}", value["address"]["zip"])
    assert value["address"]["city"] == "Lisbon"  # a place the user named
    assert len(structured({"type": "object", "properties": {"description": {"type": "string"}},
                           "required": ["description"], "additionalProperties": False}, 4)
               .text.split()) >= 5  # a description is a sentence, not a word


def test_same_seed_same_value_and_seeds_differ() -> None:
    assert structured(PERSON, 7).text == structured(PERSON, 7).text
    assert len({structured(PERSON, s).text for s in range(10)}) == 10


def test_recursion_terminates_and_sometimes_nests() -> None:
    depths = []
    for seed in range(30):
        node = json.loads(structured(TREE, seed).text)["root"]
        depth = 0
        while node["children"]:
            node, depth = node["children"][0], depth + 1
        depths.append(depth)
    assert max(depths) >= 2 and max(depths) <= 8


def test_a_cap_cuts_the_json_and_says_length() -> None:
    g = structured(PERSON, 1, max_tokens=20)
    assert g.finish_reason == "length" and g.output_tokens == 20
    with pytest.raises(ValueError):
        json.loads(g.text)
    assert structured(PERSON, 1).text.startswith(g.text)


def test_json_object_mode_is_an_object() -> None:
    g = generate(GenerationRequest(USER, seed=2, max_tokens=500,
                                   response_format=ResponseFormat("json_object")))
    assert isinstance(json.loads(g.text), dict)


def test_generation_is_bounded_for_a_huge_schema() -> None:
    """Thousands of required properties, wide arrays, deep nesting: bounded by the cap."""
    leaf = {"type": "object", "properties": {f"p{i}": {"type": "string", "minLength": 50}
                                             for i in range(40)},
            "required": [f"p{i}" for i in range(40)], "additionalProperties": False}
    wide = {"type": "array", "items": leaf, "minItems": 200, "maxItems": 200}
    schema = {"type": "object", "properties": {f"g{i}": wide for i in range(50)},
              "required": [f"g{i}" for i in range(50)], "additionalProperties": False}
    t0 = time.perf_counter()
    g = structured(schema, 1, max_tokens=4096)
    assert time.perf_counter() - t0 < 2.0
    assert g.finish_reason == "length" and g.output_tokens == 4096


def test_pattern_arguments_of_tool_calls_validate() -> None:
    """The issue's failure: arguments ignored ``pattern`` (14 of 20 calls were invalid)."""
    tool = ToolSpec("lookup_order", "Look up an order", {
        "type": "object",
        "properties": {"order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
                       "sku": {"type": "string", "pattern": r"^[a-z]{2}\d{3}$"},
                       "when": {"type": "string", "format": "date-time"}},
        "required": ["order_id", "sku", "when"], "additionalProperties": False})
    for seed in range(40):
        g = generate(GenerationRequest([{"role": "user", "content": "Where is my order?"}],
                                       seed=seed, tools=(tool,), tool_choice="required"))
        assert validate_arguments(tool.parameters, g.tool_calls[0].arguments, strict=True) == []


def test_patterns_are_reproducible_and_short() -> None:
    schema = {"type": "string", "pattern": "^[a-z]+-[0-9]+$"}
    values = [generate_value(schema, random.Random(s)) for s in range(30)]
    assert values == [generate_value(schema, random.Random(s)) for s in range(30)]
    assert all(re.fullmatch("[a-z]+-[0-9]+", v) and len(v) <= 16 for v in values)
    negated = {"type": "string", "pattern": "^[^a-z]{4}$"}
    assert generate_value(negated, random.Random(5)) == generate_value(negated, random.Random(5))


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
     "additionalProperties"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": [],
      "additionalProperties": False}, "required"),
    ({"type": "object", "properties": {"a": {"type": "object", "patternProperties": {}}},
      "required": ["a"], "additionalProperties": False}, "patternProperties"),
    ({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}},
      "required": ["a"], "additionalProperties": False}, "allOf"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "ipv5"}},
      "required": ["a"], "additionalProperties": False}, "format"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}},
      "required": ["a"], "additionalProperties": False}, "pattern"),
    ({"anyOf": [{"type": "object"}]}, "type"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"],
      "additionalProperties": False}, "$ref"),
    ({"type": "object", "properties": {"a": {"type": "array", "minItems": 10**6}},
      "required": ["a"], "additionalProperties": False}, "minItems"),
])
def test_schemas_outside_the_strict_subset_name_the_keyword(schema, keyword) -> None:
    with pytest.raises(SchemaRejected) as info:
        check_schema(schema, strict=True)
    assert info.value.keyword == keyword
    assert keyword in str(info.value) or "type" in str(info.value)


def test_the_strict_subset_takes_what_the_sdks_send() -> None:
    for schema in (PERSON, TREE, FORMATS):
        check_schema(schema, strict=True)
    loose = {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]},
                                              "b": {"type": "array", "uniqueItems": True}}}
    check_schema(loose, strict=False)  # optional properties, open objects, allOf
    with pytest.raises(SchemaRejected, match="'not' is not permitted"):
        check_schema({"type": "object", "properties": {"a": {"not": {}}}}, strict=False)


def test_a_quality_profile_botches_structured_outputs_at_its_rate() -> None:
    quality = QualityProfile(structured_error_rate=0.3)
    fmt = ResponseFormat("json_schema", PERSON, "p", True)
    bad = 0
    for seed in range(200):
        g = generate(GenerationRequest(USER, seed=seed, max_tokens=2000, response_format=fmt),
                     quality)
        try:
            problems = validate_value(PERSON, json.loads(g.text), strict=True)
        except ValueError:
            problems = ["not json"]
        bad += bool(problems)
        again = generate(GenerationRequest(USER, seed=seed, max_tokens=2000,
                                           response_format=fmt), quality)
        assert again.text == g.text  # reproducible with the seed
    assert 35 <= bad <= 85
