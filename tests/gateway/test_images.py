"""Image input: Responses ``input_image`` and Chat ``image_url`` are accepted as
base64 or URL, never fetched, billed by OpenAI's tile rule, and lengthen the modeled prefill;
an image the provider would refuse is a 400 naming the part. A remote tier gets them as Chat
``image_url`` parts, which its engine bills by the same rule."""

from __future__ import annotations

import base64
import io

import httpx
import openai
import pytest
from PIL import Image

from fastmode.backends.images import UNKNOWN_SIZE, openai_tokens
from fastmode.gateway.remote.translate import chat_messages


def data_url(width: int, height: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def responses_input(*images: dict) -> list[dict]:
    return [{"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "What is in the picture?"}, *images]}]


def test_responses_bill_images_by_the_tile_rule(quick_server: str) -> None:
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")

    def billed(*images: dict) -> int:
        resp = client.responses.create(model="frontier", input=responses_input(*images),
                                       max_output_tokens=4)
        return resp.usage.input_tokens

    text = billed()
    assert billed({"type": "input_image", "image_url": data_url(1024, 1024)}) == \
        text + openai_tokens(1024, 1024, "high")
    assert billed({"type": "input_image", "image_url": data_url(1024, 1024),
                   "detail": "low"}) == text + openai_tokens(1024, 1024, "low")
    assert billed({"type": "input_image", "image_url": data_url(300, 2000)}) == \
        text + openai_tokens(300, 2000, None)
    # a URL is not fetched: it counts as the documented default size
    assert billed({"type": "input_image", "image_url": "https://example.invalid/cat.png"}) \
        == text + openai_tokens(*UNKNOWN_SIZE, None)


def test_chat_bills_image_url_parts_the_same_way(quick_server: str) -> None:
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")

    def billed(*parts: dict) -> int:
        resp = client.chat.completions.create(model="frontier", max_completion_tokens=4,
                                              messages=[{"role": "user", "content": [
                                                  {"type": "text", "text": "Describe it."},
                                                  *parts]}])
        return resp.usage.prompt_tokens

    text = billed()
    image = {"type": "image_url", "image_url": {"url": data_url(2048, 4096), "detail": "high"}}
    assert billed(image) == text + openai_tokens(2048, 4096, "high")


def test_images_lengthen_the_modeled_prefill(quick_server: str) -> None:
    client = openai.OpenAI(base_url=quick_server + "/v1", api_key="x")
    big = {"type": "input_image", "image_url": data_url(2048, 2048)}
    plain = client.responses.create(model="frontier", input=responses_input(),
                                    max_output_tokens=2)
    heavy = client.responses.create(model="frontier", input=responses_input(*[big] * 12),
                                    max_output_tokens=2)
    assert heavy.usage.input_tokens > plain.usage.input_tokens + 12 * 700
    assert heavy.model_extra["time_info"]["prompt_time"] > \
        plain.model_extra["time_info"]["prompt_time"]


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "input_image", "image_url": "data:image/png;base64,bm90IGFuIGltYWdl"},
     "input[0].content[1].image_url"),
    ({"type": "input_image", "image_url": "ftp://example.com/cat.png"},
     "input[0].content[1].image_url"),
    ({"type": "input_image"}, "input[0].content[1].image_url"),
    ({"type": "input_image", "image_url": "https://example.com/a.png", "detail": "ultra"},
     "input[0].content[1].detail"),
])
def test_images_the_provider_would_refuse_are_400s(quick_server: str, part: dict,
                                                    param: str) -> None:
    answer = httpx.post(quick_server + "/v1/responses", timeout=30, json={
        "model": "frontier", "input": responses_input(part)})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param
    chat = httpx.post(quick_server + "/v1/chat/completions", timeout=30, json={
        "model": "frontier", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})
    assert chat.status_code == 400
    assert chat.json()["error"]["param"] == "messages[0].content[0].image_url.url"


def test_a_remote_tier_gets_chat_image_url_parts() -> None:
    url = data_url(64, 64)
    msgs = chat_messages([{"role": "user", "content": [
        {"type": "input_text", "text": "hi"},
        {"type": "input_image", "image_url": url, "detail": "low"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": url.split(",", 1)[1]}}]}])
    parts = msgs[0]["content"]
    assert parts[0] == {"type": "text", "text": "hi"}
    assert parts[1] == {"type": "image_url", "image_url": {"url": url, "detail": "low"}}
    assert parts[2] == {"type": "image_url", "image_url": {"url": url}}
