"""Canonical JSON: byte for byte what ``json.dumps`` writes, whichever encoder made it (counts and
seeded digests are taken of it)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastmode.backends.canonical_json import canonical, canonical_text

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False) | st.floats(-1e-3, 1e-3),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20)


def dumps(value: Any, ensure_ascii: bool) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str,
                      ensure_ascii=ensure_ascii)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_the_text_is_jsons_for_any_value_json_carries(value: Any) -> None:
    assert canonical(value) == dumps(value, True).encode()
    assert canonical_text(value) == dumps(value, False)


def test_the_forms_orjson_writes_otherwise_take_json() -> None:
    for value in (1e-05, 1e-07, 2.5e-9, 1e-10, 1.23e-18, 1e16, 1e22, 0.00012, 2**70, {1: "a"}, "\x7f", "é \u2028", "\ud800",
                  {"b": [1.5, {"a": None}], "a": "x"}):
        assert canonical(value) == dumps(value, True).encode()
        assert canonical_text(value) == dumps(value, False)
