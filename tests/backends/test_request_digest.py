"""The request's hash reads the bytes ``json.dumps`` wrote for it: seeded replies stay put."""

from __future__ import annotations

import json

import pytest

from fastmode.backends.canonical_json import canonical


def _json(material: object) -> bytes:
    return json.dumps(material, sort_keys=True, separators=(",", ":"), default=str).encode()


@pytest.mark.parametrize("material", [
    {"seed": None, "model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [],
     "tool_choice": None},
    {"messages": [{"content": "caf\u00e9 \u2028 \x7f \x01 \n \"q\" \\"}], "z": 1, "a": True},
    {"floats": [0.1, 1.0, 1e-05, 1.5e-07, 0.0001, 1e16, 1e21, -0.0, 123456.789]},
    {"big": 2**70, "neg": -(2**63)},
    {1: "int key"},
    {"set": {3}, "bytes": b"x", "tuple": (1, 2), "nested": {"b": [], "a": {}}},
    {"schema": {"type": "object", "properties": {"x": {"minimum": 0.00005}}}},
])
def test_the_hashed_bytes_are_json_dumps_bytes(material: dict[str, object]) -> None:
    assert canonical(material) == _json(material)

