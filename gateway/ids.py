"""Request ids: unique within a process and unlikely to collide across processes."""

from __future__ import annotations

import itertools
import os

_counter = itertools.count(1)
_prefix = os.urandom(3).hex()


def new_id(kind: str) -> str:
    """``{kind}-{6 random hex}{8 hex counter}``; protocols rewrite the kind to their own prefix
    (``chatcmpl-``, ``resp_``, ``msg_``) so one id links a request across all its names."""
    return f"{kind}-{_prefix}{next(_counter):08x}"
