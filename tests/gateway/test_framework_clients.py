"""DSPy and LangChain themselves against the gateway: ``dspy.Predict`` and
``dspy.ChainOfThought`` with typed outputs through DSPy's Chat and JSON adapters on
``openai/frontier``, and LangChain's own ``json_mode`` example (keys named in words)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal

import pytest

# litellm (under DSPy) and DSPy's model metadata would fetch a price map from the network;
# the bundled one is used instead (nothing leaves loopback)
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import dspy  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402


class Review(dspy.Signature):
    """Classify the review and extract its facts."""

    review: str = dspy.InputField()
    sentiment: Literal["positive", "negative", "neutral"] = dspy.OutputField()
    stars: int = dspy.OutputField()
    recommended: bool = dspy.OutputField()
    tags: list[str] = dspy.OutputField()
    confidence: float = dspy.OutputField()


@pytest.fixture
def lm(quick_server: str) -> Iterator[dspy.LM]:
    lm = dspy.LM("openai/frontier", api_base=quick_server + "/v1", api_key="x", cache=False,
                 num_retries=0)
    yield lm


@pytest.mark.parametrize("adapter", [dspy.ChatAdapter, dspy.JSONAdapter])
def test_dspy_predict_and_chain_of_thought(lm: dspy.LM, adapter: type) -> None:
    with dspy.context(lm=lm, adapter=adapter()):
        for module in (dspy.Predict, dspy.ChainOfThought):
            out = module("question -> answer: str, confidence: float")(
                question="What is the capital of France?")
            assert isinstance(out.answer, str) and out.answer
            assert isinstance(out.confidence, float) and 0 <= out.confidence <= 1
            if module is dspy.ChainOfThought:
                assert isinstance(out.reasoning, str) and out.reasoning


@pytest.mark.parametrize("adapter", [dspy.ChatAdapter, dspy.JSONAdapter])
def test_dspy_typed_fields(lm: dspy.LM, adapter: type) -> None:
    with dspy.context(lm=lm, adapter=adapter()):
        out = dspy.Predict(Review)(review="Great little cafe, 4 of 5, would go again.")
    assert out.sentiment in ("positive", "negative", "neutral")
    assert isinstance(out.stars, int) and isinstance(out.recommended, bool)
    assert isinstance(out.tags, list) and all(isinstance(t, str) for t in out.tags)
    assert isinstance(out.confidence, float)


def test_dspy_extraction_takes_the_texts_entities(lm: dspy.LM) -> None:
    with dspy.context(lm=lm):
        out = dspy.Predict("text -> name: str, age: int, city: str")(
            text="Ann is 31 and lives in Lyon")
    assert (out.name, out.age, out.city) == ("Ann", 31, "Lyon")


def test_langchain_json_mode_example(quick_server: str) -> None:
    llm = ChatOpenAI(model="frontier", base_url=quick_server + "/v1", api_key="x",
                     max_retries=0)
    structured = llm.with_structured_output(None, method="json_mode")
    joke = structured.invoke(
        "Tell me a joke about cats, respond in JSON with `setup` and `punchline` keys")
    assert isinstance(joke, dict) and list(joke) == ["setup", "punchline"]
    assert all(isinstance(v, str) and len(v.split()) > 3 for v in joke.values())
