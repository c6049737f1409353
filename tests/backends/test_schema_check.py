"""Tool-argument validation with jsonschema: the messages, the order, and strict mode."""

from __future__ import annotations

from fastmode.backends.mockmodel import validate_arguments, validate_value

PERSON = {
    "$defs": {"name": {"type": "object", "properties": {"first": {"type": "string"}}}},
    "type": "object",
    "allOf": [
        {"$ref": "#/$defs/name"},
        {"properties": {"age": {"type": "integer", "minimum": 0}}},
    ],
    "properties": {"tags": {"type": "array", "items": {
        "type": "object", "properties": {"k": {"type": "string"}}}}},
}


def test_strict_counts_properties_declared_in_any_applied_branch() -> None:
    ok = '{"first":"Ada","age":36,"tags":[{"k":"x"}]}'
    assert validate_arguments(PERSON, ok) == []
    assert validate_arguments(PERSON, ok, strict=True) == []  # allOf + $ref declare them
    bad = '{"first":"Ada","nick":"A","tags":[{"k":"x","v":1}]}'
    assert validate_arguments(PERSON, bad) == []  # a permissive schema
    assert validate_arguments(PERSON, bad, strict=True) == [
        "$: unexpected property 'nick'",
        "$.tags[0]: unexpected property 'v'",
    ]


def test_additional_properties_schema_is_respected_even_when_strict() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}}
    assert validate_value(schema, {"a": 1, "b": "x"}, strict=True) == []
    assert validate_value(schema, {"b": 2}) == ["$.b: expected string, got integer"]


def test_keywords_the_hand_written_checker_ignored_are_now_checked() -> None:
    schema = {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "n": {"type": "number", "multipleOf": 5},
        "one": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    }}
    problems = validate_value(schema, {"code": "abc", "n": 7, "one": 3})
    assert problems[0].startswith("$.code: 'abc' does not match")
    assert problems[1].startswith("$.n: 7 is not a multiple of 5")
    assert problems[2] == "$.one: matches more than one of the oneOf branches"


def test_declared_draft_and_invalid_schemas() -> None:
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"a": {"type": "integer"}}}
    assert validate_value(draft7, {"a": 1, "b": 2}) == []
    assert validate_value(draft7, {"a": 1, "b": 2}, strict=True) == [
        "$: unexpected property 'b'"]
    (problem,) = validate_value({"type": "strin"}, {})
    assert problem.startswith("$: the schema is invalid:")
