"""The structured-output generator's time per request, for large schemas.

Three schemas, each answered as a whole mock-model reply (``generate``: the JSON value, its
text, the tokenization and the cut at ``max_tokens``), over many seeds:

* ``crm``: a realistic large schema of the kind pydantic models produce: 60 properties over
  five ``$defs``, nested objects and arrays, enums, ``anyOf`` nulls, patterns and formats;
* ``tree``: a recursive schema (a tree of nodes through ``$ref``);
* ``worst``: 50 required arrays of 200 required objects of 40 required 50-character strings
  (~20 MB of JSON if it were written out): the budget stops generation at the cap.

Also the time to check a schema against the supported subset (done once per request at the
edge). The bound that matters: no schema takes more than a few milliseconds per thousand output
tokens, whatever it asks for.

Usage: python bench/structured.py [--seeds N] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from typing import Any

from fastmode.backends.mockmodel import (
    GenerationRequest,
    ResponseFormat,
    check_schema,
    generate,
    validate_value,
)

# a number no schema text has carried yet: the check below sees each schema for the first time
FRESH = itertools.count()


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def crm_schema() -> dict[str, Any]:
    s = {"type": "string"}
    address = _obj({"street": s, "city": s, "zip": {"type": "string", "pattern": r"^\d{5}$"},
                    "country": {"type": "string", "enum": ["PT", "FR", "JP", "CA", "KE"]}})
    contact = _obj({"name": s, "email": {"type": "string", "format": "email"},
                    "phone": {"type": "string", "pattern": r"^\+\d{1,3}-\d{3}-\d{4}$"},
                    "role": {"type": "string", "enum": ["buyer", "admin", "engineer"]}})
    line = _obj({"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{5}$"},
                 "description": s, "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                 "unit_price": {"type": "number", "minimum": 0, "maximum": 5000},
                 "discount": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1},
                                        {"type": "null"}]}})
    order = _obj({"id": {"type": "string", "format": "uuid"},
                  "placed_at": {"type": "string", "format": "date-time"},
                  "status": {"type": "string", "enum": ["open", "paid", "shipped", "closed"]},
                  "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "maxItems": 8},
                  "shipping": {"$ref": "#/$defs/Address"},
                  "notes": {"anyOf": [s, {"type": "null"}]}})
    audit = _obj({"at": {"type": "string", "format": "date-time"}, "host": {
        "type": "string", "format": "hostname"}, "ip": {"type": "string", "format": "ipv4"},
        "action": s})
    props: dict[str, Any] = {
        "account_id": {"type": "string", "pattern": "^ACC-[0-9]{8}$"},
        "company": s, "summary": s, "tier": {"type": "string", "enum": ["free", "pro", "ent"]},
        "billing": {"$ref": "#/$defs/Address"}, "contacts": {
            "type": "array", "items": {"$ref": "#/$defs/Contact"}, "minItems": 1, "maxItems": 6},
        "orders": {"type": "array", "items": {"$ref": "#/$defs/Order"}, "maxItems": 6},
        "audit": {"type": "array", "items": {"$ref": "#/$defs/Audit"}, "maxItems": 10},
        "renewal": {"type": "string", "format": "date"},
        "trial_left": {"type": "string", "format": "duration"},
        "health": {"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.5},
    }
    for i in range(20):  # custom fields, as CRMs have
        props[f"custom_{i}"] = {"anyOf": [s, {"type": "integer"}, {"type": "null"}]}
    root = _obj(props)
    root["$defs"] = {"Address": address, "Contact": contact, "Line": line, "Order": order,
                     "Audit": audit}
    return root


def tree_schema() -> dict[str, Any]:
    node = _obj({"label": {"type": "string"}, "weight": {"type": "number"},
                 "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}})
    root = _obj({"root": {"$ref": "#/$defs/Node"}})
    root["$defs"] = {"Node": node}
    return root


def worst_schema() -> dict[str, Any]:
    leaf = _obj({f"p{i}": {"type": "string", "minLength": 50} for i in range(40)})
    wide = {"type": "array", "items": leaf, "minItems": 200, "maxItems": 200}
    return _obj({f"g{i}": wide for i in range(50)})


def run(name: str, schema: dict[str, Any], cap: int, seeds: int) -> dict[str, Any]:
    fmt = ResponseFormat("json_schema", schema, name, True)
    user = [{"role": "user", "content": "Fill in the record for the Lisbon account."}]
    times, tokens, cut, valid = [], [], 0, 0
    for seed in range(seeds):
        req = GenerationRequest(user, max_tokens=cap, seed=seed, response_format=fmt)
        t0 = time.perf_counter()
        g = generate(req)
        times.append(time.perf_counter() - t0)
        tokens.append(g.output_tokens)
        if g.finish_reason == "length":
            cut += 1
        elif not validate_value(schema, json.loads(g.text), strict=True):
            valid += 1
    times.sort()
    t0 = time.perf_counter()
    for _ in range(20):  # a schema seen for the first time: verdicts are cached by its text
        check_schema({**schema, "$comment": f"check {next(FRESH)}"}, strict=True)
    check_ms = (time.perf_counter() - t0) / 20 * 1e3
    return {
        "schema": name, "max_tokens": cap, "requests": seeds,
        "p50_ms": statistics.median(times) * 1e3,
        "p99_ms": times[min(len(times) - 1, int(0.99 * len(times)))] * 1e3,
        "max_ms": times[-1] * 1e3,
        "mean_output_tokens": statistics.mean(tokens),
        "us_per_token": statistics.mean(times) / max(1.0, statistics.mean(tokens)) * 1e6,
        "cut_at_cap": cut, "valid": valid, "schema_check_ms": check_ms,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [
        run("crm", crm_schema(), 4096, args.seeds),
        run("crm", crm_schema(), 16384, args.seeds),
        run("tree", tree_schema(), 4096, args.seeds),
        run("worst", worst_schema(), 4096, max(10, args.seeds // 10)),
        run("worst", worst_schema(), 32768, max(5, args.seeds // 20)),
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    head = (f"{'schema':<7} {'cap':>6} {'reqs':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"{'out tok':>8} {'us/tok':>7} {'cut':>4} {'valid':>5} {'check ms':>8}")
    print(head)
    for r in rows:
        print(f"{r['schema']:<7} {r['max_tokens']:>6} {r['requests']:>5} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['max_ms']:>8.2f} {r['mean_output_tokens']:>8.0f} "
              f"{r['us_per_token']:>7.1f} {r['cut_at_cap']:>4} {r['valid']:>5} "
              f"{r['schema_check_ms']:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
