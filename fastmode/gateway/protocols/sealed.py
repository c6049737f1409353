"""Opaque reasoning tokens handed to clients and checked when they come back.

OpenAI returns a reasoning item's ``encrypted_content`` and Anthropic a thinking block's
``signature`` so that a client can send the reasoning back on the next turn and the server can
tell it is its own. fastmode seals a small JSON payload (base64url) with a keyed BLAKE2 tag:
a value the client altered, or that another server made, fails the check and the request is a
400, as with the providers. The key is fixed and public: this is a tamper check for a mock, not
security, and a value stays valid across restarts and gateway processes.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson

_KEY = b"fastmode-sealed-reasoning-v1"
_PREFIX = "fm1"


def _tag(kind: str, body: bytes) -> str:
    return hashlib.blake2b(kind.encode() + b"." + body, key=_KEY, digest_size=16).hexdigest()


def seal(kind: str, payload: dict[str, Any]) -> str:
    body = base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=")
    return f"{_PREFIX}.{body.decode()}.{_tag(kind, body)}"


def unseal(kind: str, token: Any) -> dict[str, Any] | None:
    """The payload of a token this server sealed for ``kind``; None if it is not one."""
    if not isinstance(token, str):
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != _PREFIX:
        return None
    body = parts[1].encode()
    if _tag(kind, body) != parts[2]:
        return None
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def thinking_signature(text: str, tokens: int, omitted: bool) -> str:
    """An Anthropic thinking block's ``signature``: binds the block's text (unless the text
    was omitted from the response) and its token count."""
    return seal("thinking", {"h": "" if omitted else digest(text), "n": tokens})


def thinking_is_ours(block: dict[str, Any]) -> bool:
    payload = unseal("thinking", block.get("signature"))
    if payload is None:
        return False
    return payload.get("h") in ("", digest(str(block.get("thinking") or "")))


def reasoning_content(item_id: str, tokens: int, effort: str) -> str:
    """A Responses reasoning item's ``encrypted_content``."""
    return seal("reasoning", {"id": item_id, "n": tokens, "e": effort})


def reasoning_is_ours(item: dict[str, Any]) -> bool:
    return unseal("reasoning", item.get("encrypted_content")) is not None


def compaction_content(item_id: str, text: str, owner: str | None, calls: list[str]) -> str:
    """A compaction item's ``encrypted_content``: the summary that stands for the compacted
    items, the key id of the key that made it (another key's request cannot use it, as an
    OpenAI organization cannot use another's) and the tool calls it still answers for."""
    return seal("compaction", {"id": item_id, "t": text, "o": owner, "c": calls})


def compaction_payload(item: dict[str, Any]) -> dict[str, Any] | None:
    return unseal("compaction", item.get("encrypted_content"))
