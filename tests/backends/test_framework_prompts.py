"""The output formats frameworks write into prompts, followed by the mock model: DSPy's field
markers (its Chat adapter) and typed JSON example (its JSON adapter), keys named in words,
and extraction of what the prompt states. The DSPy prompts are the exact messages DSPy 3.4.1
sent in real runs (``fixtures/dspy_prompts.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fastmode.backends.mockmodel import GenerationRequest, ResponseFormat, generate
from fastmode.backends.mockmodel.entities import extract
from fastmode.backends.mockmodel.field_markers import asked_fields
from fastmode.backends.mockmodel.named_keys import named_keys

PROMPTS = json.loads((Path(__file__).parent / "fixtures" / "dspy_prompts.json").read_text())
MARKER = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\Z)", re.S)


def _reply(messages: list[dict[str, Any]], seed: int, fmt: ResponseFormat | None = None) -> str:
    return generate(GenerationRequest(messages, seed=seed, response_format=fmt)).text


def _fields(text: str) -> dict[str, str]:
    """The reply split as DSPy's Chat adapter splits it: by its markers."""
    return dict(MARKER.findall(text))


@pytest.mark.parametrize("seed", range(20))
def test_chat_adapter_predict_gets_its_fields(seed: int) -> None:
    text = _reply(PROMPTS["chat_predict"], seed)
    assert text.startswith("[[ ## answer ## ]]\n") and text.endswith("[[ ## completed ## ]]")
    fields = _fields(text)
    assert list(fields) == ["answer", "confidence"]
    assert fields["answer"].strip() and 0.0 <= float(fields["confidence"]) <= 1.0


@pytest.mark.parametrize("seed", range(20))
def test_chain_of_thought_reasons_first(seed: int) -> None:
    fields = _fields(_reply(PROMPTS["chat_chain_of_thought"], seed))
    assert list(fields) == ["reasoning", "answer", "confidence"]
    assert len(fields["reasoning"].split()) > 3
    float(fields["confidence"])


@pytest.mark.parametrize("seed", range(30))
def test_each_type_note_is_followed(seed: int) -> None:
    """Literal, int, bool, list[str], float: each field parses as its type."""
    fields = _fields(_reply(PROMPTS["chat_typed"], seed))
    assert fields["sentiment"] in ("positive", "negative", "neutral")
    assert fields["count"] == "3"  # "I love these 3 cats!": the number the text states
    assert fields["is_question"] in ("True", "False")
    tags = json.loads(fields["tags"])
    assert isinstance(tags, list) and all(isinstance(t, str) for t in tags)
    float(fields["score"])


def test_the_fields_are_read_from_the_prompt() -> None:
    fields = asked_fields(PROMPTS["chat_typed"])
    assert fields is not None
    schemas = {f.name: f.schema for f in fields}
    assert schemas["sentiment"] == {"type": "string", "enum": ["positive", "negative", "neutral"]}
    assert schemas["tags"] == {"type": "array", "items": {"type": "string"}}
    assert asked_fields([{"role": "user", "content": "What is [[ ## x ## ]]?"}]) is None


@pytest.mark.parametrize("name", ["json_predict", "json_fallback_predict",
                                  "json_chain_of_thought"])
@pytest.mark.parametrize("seed", range(10))
def test_json_adapter_values_have_their_noted_types(name: str, seed: int) -> None:
    """The JSON adapter's example has string values with type notes; the float is a float.
    (It sends no response_format to an unknown model; with json_object it is the same.)"""
    for fmt in (None, ResponseFormat("json_object")):
        value = json.loads(_reply(PROMPTS[name], seed, fmt))
        assert isinstance(value["confidence"], float) and 0 <= value["confidence"] <= 1
        assert isinstance(value["answer"], str)
        assert list(value)[-2:] == ["answer", "confidence"]


@pytest.mark.parametrize("seed", range(10))
def test_json_adapter_extraction_takes_what_the_text_states(seed: int) -> None:
    assert json.loads(_reply(PROMPTS["json_extract"], seed)) == {
        "name": "Ann", "age": 31, "city": "Lyon"}


@pytest.mark.parametrize(("prompt", "keys"), [
    ("Tell me a joke about cats, respond in JSON with `setup` and `punchline` keys",
     ["setup", "punchline"]),
    ("Return JSON with keys: title, year and tags", ["title", "year", "tags"]),
    ('Answer in JSON with the fields "city" and "country".', ["city", "country"]),
])
def test_keys_named_in_words(prompt: str, keys: list[str]) -> None:
    assert named_keys(prompt) == keys
    for seed in range(5):
        value = json.loads(_reply([{"role": "user", "content": prompt}], seed,
                                  ResponseFormat("json_object")))
        assert list(value) == keys
    year = json.loads(_reply([{"role": "user", "content": "Return JSON with keys: title, year"}],
                             1, ResponseFormat("json_object")))["year"]
    assert isinstance(year, int)


def test_a_joke_is_sentences() -> None:
    prompt = "Tell me a joke about cats, respond in JSON with `setup` and `punchline` keys"
    value = json.loads(_reply([{"role": "user", "content": prompt}], 3,
                              ResponseFormat("json_object")))
    assert all(len(value[k].split()) > 3 for k in ("setup", "punchline"))


def test_prose_about_keys_is_not_a_key_list() -> None:
    assert named_keys("Respond in JSON. The key points are speed and cost.") == []


@pytest.mark.parametrize(("text", "people", "places", "ages"), [
    ("Ann is 31 and lives in Lyon", ["Ann"], ["Lyon"], [31]),
    ("Extract: Bob Smith (45) works in New York.", ["Bob Smith"], ["New York"], [45]),
    ("My friend named Kenji moved to Osaka; Maria, aged 27, is from Lima.",
     ["Kenji", "Maria"], ["Osaka", "Lima"], [27]),
    ("What is the weather in Paris?", [], ["Paris"], []),
])
def test_entities_are_read_from_the_text(text: str, people: list[str], places: list[str],
                                         ages: list[int]) -> None:
    e = extract(text)
    assert (e.people, e.places, e.ages) == (people, places, ages)


def test_a_schema_extracts_each_person_of_the_text() -> None:
    person = {"type": "object", "required": ["name", "age", "city"],
              "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                             "city": {"type": "string"}}}
    schema = {"type": "object", "required": ["people"],
              "properties": {"people": {"type": "array", "items": person, "minItems": 2,
                                        "maxItems": 2}}}
    text = "Kenji is 40 and lives in Osaka. Maria, aged 27, is from Lima."
    value = json.loads(_reply([{"role": "user", "content": text}], 5,
                              ResponseFormat("json_schema", schema)))
    assert value == {"people": [{"name": "Kenji", "age": 40, "city": "Osaka"},
                                {"name": "Maria", "age": 27, "city": "Lima"}]}
