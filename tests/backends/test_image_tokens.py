"""Image tokens by each provider's published rule (``backends.images``)."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from fastmode.backends.images import (
    LOW_DETAIL,
    PER_TILE,
    UNKNOWN_SIZE,
    ImageError,
    anthropic_tokens,
    data_url_size,
    openai_tokens,
    part_tokens,
)


def png(width: int, height: int, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, fmt)
    return out.getvalue()


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def test_openai_tile_rule_on_its_guides_examples() -> None:
    # OpenAI's vision guide: a 1024 x 1024 image at high detail is scaled to 768 x 768,
    # 4 tiles; a 2048 x 4096 one to 768 x 1536, 6 tiles; low detail is the base alone
    assert openai_tokens(1024, 1024, "high") == LOW_DETAIL + 4 * PER_TILE
    assert openai_tokens(2048, 4096, "high") == LOW_DETAIL + 6 * PER_TILE
    assert openai_tokens(4096, 8192, "low") == LOW_DETAIL
    assert openai_tokens(32, 32, "auto") == LOW_DETAIL + PER_TILE  # small: one tile
    assert openai_tokens(1024, 1024, None) == openai_tokens(1024, 1024, "high")


def test_anthropic_rule() -> None:
    # Anthropic's vision guide: width x height / 750, after fitting a 1568 px long edge
    # and about 1.2 megapixels
    assert anthropic_tokens(1000, 1000) == -(-1000 * 1000 // 750)
    assert anthropic_tokens(200, 200) == -(-200 * 200 // 750)
    huge = anthropic_tokens(8000, 8000)  # scaled down to the pixel budget first
    assert anthropic_tokens(1000, 1000) < huge <= 1600
    assert anthropic_tokens(3000, 1000) == anthropic_tokens(1568, 523)  # the long edge


def test_sizes_are_read_from_the_header_of_each_format() -> None:
    for fmt, mime in (("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"),
                      ("WEBP", "image/webp")):
        assert data_url_size(data_url(png(640, 480, fmt), mime)) == (640, 480)
    assert data_url_size("https://example.com/cat.png") is None  # never fetched


@pytest.mark.parametrize("bad", ["data:image/png;base64,AAAA", "data:image/png,rawbytes",
                                 data_url(png(8, 8, "BMP"), "image/bmp")])
def test_what_is_not_an_accepted_image_is_refused(bad: str) -> None:
    with pytest.raises(ImageError):
        data_url_size(bad)


def test_parts_of_each_provider() -> None:
    raw = png(1024, 1024)
    chat = {"type": "image_url", "image_url": {"url": data_url(raw), "detail": "high"}}
    responses = {"type": "input_image", "image_url": data_url(raw), "detail": "low"}
    anthropic = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(raw).decode()}}
    assert part_tokens(chat) == openai_tokens(1024, 1024, "high")
    assert part_tokens(responses) == LOW_DETAIL
    assert part_tokens(anthropic) == anthropic_tokens(1024, 1024)
    by_url = {"type": "input_image", "image_url": "https://example.com/cat.png"}
    assert part_tokens(by_url) == openai_tokens(*UNKNOWN_SIZE, None)
    assert part_tokens({"type": "input_image", "file_id": "file-1"}) == part_tokens(by_url)
