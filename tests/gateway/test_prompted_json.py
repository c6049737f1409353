"""JSON asked for in the prompt, end to end: LangChain's ``json_mode`` and the
prompts instructor and pydantic-ai send, over Chat, Responses and Messages with the official
SDKs. (instructor 1.17 and pydantic-ai 2.38 themselves were run against a server in a scratch
venv: every mode validated; see docs/structured-outputs.md.)"""

from __future__ import annotations

import json

import anthropic
import openai
from langchain_openai import ChatOpenAI
from pydantic import BaseModel


class Joke(BaseModel):
    setup: str
    punchline: str
    rating: int


SCHEMA_PROMPT = ("Always respond with a JSON object that's compatible with this schema:\n\n"
                 f"{json.dumps(Joke.model_json_schema())}\n\nDon't include any text or "
                 "Markdown fencing before or after.")


def test_langchain_json_mode_with_an_example_and_with_a_schema(quick_server: str) -> None:
    llm = ChatOpenAI(model="gpt-4o", base_url=quick_server + "/v1", api_key="x", max_retries=0)
    structured = llm.with_structured_output(Joke, method="json_mode")
    joke = structured.invoke('Tell me a joke about cats. Respond in JSON with the keys '
                             '"setup", "punchline" and "rating", e.g. {"setup": "...", '
                             '"punchline": "...", "rating": 7}')
    assert isinstance(joke, Joke)
    schema_led = structured.invoke("Tell me a joke about cats. Respond in JSON matching this "
                                   "schema: " + json.dumps(Joke.model_json_schema()))
    assert isinstance(schema_led, Joke)


def test_responses_instructions_and_anthropic_system_carry_the_schema(quick_server: str) -> None:
    oai = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")
    r = oai.responses.create(model="frontier", instructions=SCHEMA_PROMPT,
                             input="A joke about dogs", max_output_tokens=500)
    Joke.model_validate_json(r.output_text)
    chat = oai.chat.completions.create(model="frontier", max_tokens=500, stream=True,
                                       messages=[{"role": "system", "content": SCHEMA_PROMPT},
                                                 {"role": "user", "content": "A joke"}])
    Joke.model_validate_json("".join(c.choices[0].delta.content or "" for c in chat
                                     if c.choices))
    ant = anthropic.Anthropic(base_url=quick_server, api_key="x")
    msg = ant.messages.create(model="frontier", max_tokens=500, system=SCHEMA_PROMPT,
                              messages=[{"role": "user", "content": "A joke about owls"}])
    Joke.model_validate_json(msg.content[0].text)
