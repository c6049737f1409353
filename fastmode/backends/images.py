"""What an image in a prompt costs, by each provider's published rule.

An image part is never fetched: a base64 image (an OpenAI ``data:`` URL, an Anthropic
``base64`` source) is measured from its header (Pillow reads the size without decoding the
pixels); an image given by URL or file id, whose size the gateway cannot know without fetching
it, counts as ``UNKNOWN_SIZE`` (a 1024 x 1024 picture: 765 tokens at OpenAI's high detail).

* OpenAI (Chat ``image_url``, Responses ``input_image``), the tile rule of its vision guide:
  ``detail: "low"`` is 85 tokens; otherwise (``high``, and ``auto``, which fastmode bills as
  ``high``: the upper bound) the image is scaled to fit in 2048 x 2048, then down so that its
  short side is at most 768 px, and costs 85 + 170 per 512 px tile it covers.
* Anthropic (``image`` blocks): scaled down to a long edge of at most 1568 px and at most about
  1600 tokens (1.2 megapixels), then ``width x height / 750`` tokens.

The count never fails (a prompt is counted where no error can be answered); ``image_size``
raises ``ImageError`` for an image that cannot be read, which the gateway answers with a 400.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import warnings
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

__all__ = ["FORMATS", "UNKNOWN_SIZE", "ImageError", "anthropic_tokens", "image_size",
           "openai_tokens", "part_tokens"]

FORMATS = ("PNG", "JPEG", "GIF", "WEBP")  # what both providers accept
UNKNOWN_SIZE = (1024, 1024)  # an image the gateway cannot see (a URL, a file id)
LOW_DETAIL = 85  # OpenAI: a low-detail image, and the base of a high-detail one
PER_TILE = 170  # OpenAI: each 512 px tile of a high-detail image
TILE = 512
OPENAI_FIT = 2048  # OpenAI: first scaled to fit a 2048 x 2048 square...
OPENAI_SHORT_SIDE = 768  # ...then its short side to at most 768 px
ANTHROPIC_LONG_EDGE = 1568
ANTHROPIC_MAX_PIXELS = 1_200_000  # ~1600 tokens
ANTHROPIC_PIXELS_PER_TOKEN = 750


class ImageError(ValueError):
    """The bytes are not an image in one of ``FORMATS``."""


@lru_cache(maxsize=256)
def _decoded_size(b64: str) -> tuple[int, int]:
    try:
        raw = base64.b64decode(b64, validate=False)
    except (binascii.Error, ValueError):
        raise ImageError("the image data is not valid base64") from None
    return image_size(raw)


def image_size(raw: bytes) -> tuple[int, int]:
    """Width and height of an image from its header (the pixels are not decoded)."""
    from PIL import Image, UnidentifiedImageError  # imported when an image first comes

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a huge image is measured, not decoded
            with Image.open(io.BytesIO(raw), formats=FORMATS) as img:
                width, height = img.size
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise ImageError("the image is not a PNG, JPEG, GIF or WebP image") from None
    if width <= 0 or height <= 0:
        raise ImageError("the image has no pixels")
    return width, height


def data_url_size(url: str) -> tuple[int, int] | None:
    """The size of a ``data:`` URL's image; None for any other URL (not fetched)."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise ImageError("a data URL image must be base64 (data:image/...;base64,...)")
    return _decoded_size(data)


def openai_tokens(width: int, height: int, detail: str | None) -> int:
    """OpenAI's tile rule (see the module docstring)."""
    if detail == "low":
        return LOW_DETAIL
    w, h = float(width), float(height)
    fit = min(1.0, OPENAI_FIT / max(w, h))
    w, h = w * fit, h * fit
    short = min(1.0, OPENAI_SHORT_SIDE / min(w, h))
    w, h = w * short, h * short
    return LOW_DETAIL + PER_TILE * math.ceil(w / TILE) * math.ceil(h / TILE)


def anthropic_tokens(width: int, height: int) -> int:
    """Anthropic's rule (see the module docstring)."""
    w, h = float(width), float(height)
    scale = min(1.0, ANTHROPIC_LONG_EDGE / max(w, h), math.sqrt(ANTHROPIC_MAX_PIXELS / (w * h)))
    pixels = max(1, round(w * scale)) * max(1, round(h * scale))  # the resized image's
    return math.ceil(pixels / ANTHROPIC_PIXELS_PER_TOKEN)


def openai_part_image(part: Mapping[str, Any]) -> tuple[str, str | None]:
    """(url, detail) of a Chat ``image_url`` or a Responses ``input_image`` part ("" if none)."""
    ref = part.get("image_url")
    detail = part.get("detail")
    if isinstance(ref, Mapping):  # Chat: {"url": ..., "detail": ...}
        detail = ref.get("detail")
        ref = ref.get("url")
    return (ref if isinstance(ref, str) else ""), (detail if isinstance(detail, str) else None)


def anthropic_size(part: Mapping[str, Any]) -> tuple[int, int] | None:
    """The size of an Anthropic ``image`` block's base64 source; None for a URL or file."""
    source = part.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        data = source.get("data")
        if not isinstance(data, str):
            raise ImageError("the image source has no base64 data")
        return _decoded_size(data)
    return None


def part_tokens(part: Mapping[str, Any]) -> int:
    """The prompt tokens of one image part, by the rule of the provider whose part it is."""
    anthropic = part.get("type") == "image"
    url, detail = openai_part_image(part)
    try:
        size = anthropic_size(part) if anthropic else data_url_size(url) if url else None
    except ImageError:  # the gateway refuses it (a 400) before it counts
        size = None
    size = size or UNKNOWN_SIZE
    return anthropic_tokens(*size) if anthropic else openai_tokens(*size, detail)
