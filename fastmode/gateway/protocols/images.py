"""Image parts of OpenAI requests (Chat ``image_url``, Responses ``input_image``), checked.

Nothing is fetched: a ``data:`` URL's image is read from its header (``backends.images``), an
``http(s)`` URL or a ``file_id`` is taken on trust and billed at the documented default size.
A part the provider would refuse (no image, a URL of another scheme, data that is not a PNG,
JPEG, GIF or WebP image) is a 400 naming the part, before any work. What an image costs is the
tokenizer's (``backends.tokenizer`` counts every image part by its provider's rule), so the
prompt's length, its price and its modeled prefill all include it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastmode.backends.images import ImageError, data_url_size, openai_part_image
from fastmode.gateway.errors import APIError, bad_request

IMAGE_PARTS = ("image_url", "input_image")
DETAILS = ("low", "high", "auto")


def check_images(items: Sequence[Any], root: str) -> None:
    """Every image part of ``items`` (Chat messages or Responses input items, ``root`` their
    field name) is one the provider would accept."""
    for i, item in enumerate(items):
        content = item.get("content") if isinstance(item, Mapping) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") in IMAGE_PARTS:
                _check(part, f"{root}[{i}].content[{j}]")


def _check(part: Mapping[str, Any], where: str) -> None:
    url, detail = openai_part_image(part)
    field = f"{where}.image_url" + (".url" if isinstance(part.get("image_url"), Mapping) else "")
    if detail is not None and detail not in DETAILS:
        raise bad_request(f"Invalid value for '{where}.detail': {detail!r}; expected one of "
                          f"{', '.join(DETAILS)}.", param=f"{where}.detail", code="invalid_value")
    if not url:
        if part.get("type") == "input_image" and isinstance(part.get("file_id"), str):
            return
        raise bad_request(f"Missing required parameter: '{field}'.", param=field,
                          code="missing_required_parameter")
    if url.startswith(("http://", "https://")):
        return
    if not url.startswith("data:"):
        raise bad_request(f"Invalid '{field}': expected an http(s) URL or a base64 data URL "
                          "('data:image/png;base64,...').", param=field, code="invalid_value")
    try:
        data_url_size(url)
    except ImageError as exc:
        raise APIError(400, f"Invalid image at '{field}': {exc}. Supported formats: png, "
                       "jpeg, gif, webp.", param=field, code="invalid_image_format") from None
