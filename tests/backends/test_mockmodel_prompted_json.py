"""JSON asked for in the prompt, not the API: the mock model answers with JSON that
fits the schema or example the prompt carries, fenced when a code block is asked for, botched
at the tier's ``structured_error_rate``; prose when the prompt only shows JSON.

The prompts are built as the frameworks build them: instructor's ``Mode.JSON`` (the model's
schema, indented, in the system message; ``response_format`` json_object) and ``MD_JSON`` (the
same system message, then a user line asking for a ```json codeblock), pydantic-ai's
``PromptedOutput`` (the schema in the instructions, "no Markdown fencing"), LangChain's
``json_mode`` (json_object; the shape is the user's business: an example or a schema)."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from fastmode.backends.mockmodel import (
    GenerationRequest,
    QualityProfile,
    ResponseFormat,
    generate,
    validate_value,
)
from fastmode.backends.mockmodel.prompted_json import prompted_json, schema_of_example


class Address(BaseModel):
    city: str
    zip_code: str = Field(pattern=r"^\d{5}$")


class User(BaseModel):
    name: str
    age: int = Field(ge=0, le=130)
    emails: list[str]
    address: Address | None = None


SCHEMA = User.model_json_schema()
USER_TEXT = "Extract the user: Jason is 25, jason@example.com, lives in Lyon."


def instructor_system() -> str:
    return ("\nAs a genius expert, your task is to understand the content and provide\n"
            "the parsed objects in json that match the following json_schema:\n\n\n"
            f"{json.dumps(SCHEMA, indent=2)}\n\n"
            "Make sure to return an instance of the JSON, not the schema itself\n")


def pydantic_ai_instructions() -> str:
    return ("Always respond with a JSON object that's compatible with this schema:\n\n"
            f"{json.dumps(SCHEMA)}\n\nDon't include any text or Markdown fencing before or "
            "after.\n")


def reply(messages: list[dict[str, Any]], fmt: ResponseFormat | None = None, seed: int = 1,
          quality: QualityProfile | None = None) -> str:
    gen = generate(GenerationRequest(messages, max_tokens=2000, seed=seed, response_format=fmt),
                   quality or QualityProfile())
    assert gen.finish_reason == "stop" and not gen.tool_calls
    return gen.text


def test_instructor_json_mode_gets_an_instance_of_the_schema() -> None:
    for seed in range(20):
        text = reply([{"role": "system", "content": instructor_system()},
                      {"role": "user", "content": USER_TEXT}],
                     ResponseFormat("json_object"), seed)
        value = json.loads(text)
        assert validate_value(SCHEMA, value) == [], text
        User.model_validate(value)


def test_instructor_md_json_gets_a_fenced_block() -> None:
    ask = "Return the correct JSON response within a ```json codeblock. not the JSON_SCHEMA"
    text = reply([{"role": "system", "content": instructor_system()},
                  {"role": "user", "content": USER_TEXT + "\n\n" + ask}])
    block = re.fullmatch(r"```json\n(.*)\n```", text, re.S)
    assert block is not None, text
    User.model_validate_json(block.group(1))


def test_pydantic_ai_prompted_output_gets_bare_json() -> None:
    for seed in range(10):
        text = reply([{"role": "system", "content": pydantic_ai_instructions()},
                      {"role": "user", "content": USER_TEXT}], seed=seed)
        User.model_validate_json(text)  # no fence: the template forbids one


def test_a_json_example_in_the_prompt_shapes_the_reply() -> None:
    """LangChain's json_mode: the user writes the shape, here as an example."""
    ask = ('Tell me a joke. Respond in JSON like {"setup": "...", "punchline": "...", '
           '"rating": 7, "tags": ["pun"]}')
    for fmt in (ResponseFormat("json_object"), None):
        value = json.loads(reply([{"role": "user", "content": ask}], fmt))
        assert set(value) == {"setup", "punchline", "rating", "tags"}
        assert isinstance(value["rating"], int) and isinstance(value["setup"], str)
        assert value["tags"] and all(isinstance(t, str) for t in value["tags"])


def test_the_reply_after_a_tool_result_still_fits_the_schema() -> None:
    text = reply([{"role": "system", "content": pydantic_ai_instructions()},
                  {"role": "user", "content": USER_TEXT},
                  {"role": "assistant", "content": None, "tool_calls": [{
                      "id": "c1", "type": "function",
                      "function": {"name": "lookup", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "found"}])
    User.model_validate_json(text)


def test_json_shown_but_not_asked_for_gets_prose() -> None:
    ask = 'What is wrong with this JSON? {"name": "x", "age": 3}'
    assert prompted_json([{"role": "user", "content": ask}]) is None
    text = reply([{"role": "user", "content": ask}])
    assert not text.lstrip().startswith("{")


def test_a_prompted_schema_is_botched_at_the_tiers_rate() -> None:
    weak = QualityProfile(structured_error_rate=0.5)
    messages = [{"role": "system", "content": pydantic_ai_instructions()},
                {"role": "user", "content": USER_TEXT}]
    bad = 0
    for seed in range(200):
        try:
            value = json.loads(reply(messages, seed=seed, quality=weak))
        except ValueError:
            bad += 1
            continue
        bad += bool(validate_value(SCHEMA, value))
    assert 60 < bad < 140  # about half, reproducibly seeded
    assert all(User.model_validate_json(reply(messages, seed=s)) for s in range(20))


def test_a_schema_outside_the_subset_is_pruned_and_examples_derive_one() -> None:
    odd = {"type": "object", "properties": {"n": {"type": "integer", "x-weird": 1}},
           "required": ["n"], "patternProperties": {"^a": {"type": "string"}}}
    asked = prompted_json([{"role": "user",
                            "content": "Output JSON matching " + json.dumps(odd)}])
    assert asked is not None and asked.format.schema is not None
    assert "patternProperties" not in asked.format.schema
    assert schema_of_example({"a": [{"b": 1.5}], "c": None}) == {
        "type": "object", "required": ["a", "c"], "properties": {
            "a": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["b"], "properties": {"b": {"type": "number"}}}},
            "c": {"type": "null"}}}
