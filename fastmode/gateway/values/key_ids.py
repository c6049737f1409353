"""How state names an API key: by a hash, never the key itself (ledger rows, Redis key names,
stored objects' owners). See ``gateway.stored.ownership``."""

from __future__ import annotations

import hashlib

KEY_ID_PREFIX = "key_"
KEY_ID_HEX = 32  # 128 bits of SHA-256


def key_id(key: str) -> str:
    """The stored name of an API key: ``key_`` and 32 hex digits of its SHA-256."""
    return KEY_ID_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:KEY_ID_HEX]


def is_key_id(text: str) -> bool:
    """Whether ``text`` is a key id (as ``/v1/usage`` shows one) rather than a key."""
    body = text.removeprefix(KEY_ID_PREFIX)
    return (len(body) == KEY_ID_HEX and body != text
            and all(c in "0123456789abcdef" for c in body))
