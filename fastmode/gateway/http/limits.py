"""Bounds on everything a client controls, checked before the work.

Four layers, each as early as it can be:

* **the HTTP head** (``gateway.edge.connections``): 431 once it passes ``limits.max_header_bytes``,
  before the rest is buffered, and a deadline to send it;
* **the body** (``BodyLimit``, ASGI middleware): a declared ``content-length`` over
  ``limits.max_body_bytes`` is answered 413 before a byte of the body is read; a chunked body
  is counted as it arrives and refused the moment it passes the bound;
* **the raw body** (``check_json_values``, before ``orjson.loads``): at most
  ``limits.max_json_values`` values, so that no body within the size bound takes seconds to
  parse (a parse holds the GIL);
* **the parsed request** (``check_request``): message / tool / content-part / stop-sequence
  counts first (they cost nothing and bound every walk after them), content parts' ``type``,
  JSON nesting depth (iteratively, so a 1,000-deep object is a 400, not a ``RecursionError``),
  and every tool's and structured output's JSON schema: valid against the JSON Schema meta-schema (``jsonschema``), and bounded in
  the keywords that drive value generation (``minItems``, ``maxItems``, ``minLength``, enum
  size, nesting, and the worst-case number of values a schema asks for), so that no schema makes
  generation slow. Each refusal is a 400 naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any

import orjson
from jsonschema import Draft202012Validator, SchemaError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastmode.backends.memo import Memo
from fastmode.gateway.config import LimitsConfig
from fastmode.gateway.errors import APIError, bad_request

GENERATOR_DEPTH = 6  # backends.mockmodel.schema_values follows optional parts this deep only


class BodyTooLarge(APIError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"The request body is larger than {limit} bytes.",
                         code="request_too_large")


class BodyLimit:
    """ASGI middleware: 413 for HTTP bodies over ``max_bytes``, before they are buffered."""

    def __init__(self, app: ASGIApp, max_bytes: int, answer: Any) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.answer = answer  # (path, APIError) -> ASGI response in the route's format

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The app's own coroutine when there is nothing to count (not HTTP, or a declared
        length within the bound: the server reads no more than that), so a request's frames
        do not include this one (each frame of the chain is run again at every resumption
        of the request's task); otherwise a coroutine that answers or counts."""
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        limit = self.max_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit or declared < 0:
                    error = BodyTooLarge(limit) if declared > limit else bad_request(
                        "Invalid Content-Length header.")
                    answer: Awaitable[None] = self.answer(scope["path"], error)(scope, receive,
                                                                                 send)
                    return answer
                # an HTTP/1.1 message ends at its declared length: nothing left to count
                return self.app(scope, receive, send)
        return self._counted(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_bytes
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)  # the route answers it in its own format
            return message

        await self.app(scope, counted, send)


# -- the raw body, before it is parsed -----------------------------------------------------

# every byte of a body is in one match: a JSON string, a run outside strings, or a lone quote
_PIECES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[^"]+|"')
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_PIECES_PER_CHUNK = 1 << 15
_MARKS = (b",", b":", b"[", b"{")


def json_values(raw: bytes, limit: int) -> int:
    """An upper bound of the values and members in a JSON body (its ``,`` ``:`` ``[`` ``{``
    outside strings), counted only as far as needed to tell whether it is over ``limit``.

    ``orjson.loads`` is one C call that holds the GIL: 5 million empty arrays take it for
    ~0.6 s, whatever thread runs it. Its cost follows the number of values, so the body's
    values are bounded before it is parsed. The marks of the whole body, strings included,
    are counted first (four ``bytes.count``, ~2 ms for 16 MB); only a body over the limit
    by that count has its strings taken out, a chunk of ``_PIECES_PER_CHUNK`` pieces at a
    time (each chunk ends outside a string; the GIL is free between chunks)."""
    total = sum(raw.count(m) for m in _MARKS)
    if total <= limit:
        return total
    total, rest = 0, raw
    while rest and total <= limit:
        after, _ = _PIECES.subn(b"", rest, count=_PIECES_PER_CHUNK)
        chunk = _STRING.sub(b"", rest[:len(rest) - len(after)])
        total += sum(chunk.count(m) for m in _MARKS)
        rest = after
    return total


def check_json_values(raw: bytes, limit: int) -> None:
    """400 before parsing a body with more than ``limit`` values (``json_values``)."""
    if json_values(raw, limit) > limit:
        raise bad_request(f"The request body has more than {limit} JSON values.",
                          code="too_many_values")


# -- the parsed request --------------------------------------------------------------------


def check_depth(value: Any, max_depth: int, param: str = "body") -> None:
    """400 if ``value`` nests objects/arrays deeper than ``max_depth`` (iterative walk)."""
    if not isinstance(value, (dict, list)):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append  # (plain loops: this runs on every request)
    while stack:
        node, depth = pop()
        if depth > max_depth:
            raise bad_request(f"The request nests objects or arrays deeper than {max_depth} "
                              "levels.", param=param, code="nesting_too_deep")
        deeper = depth + 1
        for v in node.values() if isinstance(node, dict) else node:
            if isinstance(v, (dict, list)):
                push((v, deeper))


def _count(body: Mapping[str, Any], field: str, limit: int) -> None:
    value = body.get(field)
    if isinstance(value, list) and len(value) > limit:
        raise bad_request(f"Invalid '{field}': at most {limit} items are allowed, got "
                          f"{len(value)}.", param=field, code="too_many_items")


def _tool_schemas(protocol: str, body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        if protocol == "chat":
            fn = tool.get("function")
            if isinstance(fn, dict) and "parameters" in fn:
                out.append((f"tools[{i}].function.parameters", fn["parameters"]))
        elif protocol == "messages":
            if "input_schema" in tool:
                out.append((f"tools[{i}].input_schema", tool["input_schema"]))
        elif "parameters" in tool and tool["parameters"] is not None:
            out.append((f"tools[{i}].parameters", tool["parameters"]))
    return out


_FORMAT_SCHEMAS = {  # where each protocol's structured-output schema is in the body
    "chat": (("response_format", "json_schema", "schema"),),
    "responses": (("text", "format", "schema"),),
    "messages": (("output_config", "format", "schema"), ("output_format", "schema")),
}


def _format_schemas(protocol: str, body: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for path in _FORMAT_SCHEMAS.get(protocol, ()):
        node: Any = body
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            yield ".".join(path), node


def _parts(body: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(param, part) for every content part: of messages / input items, of an Anthropic
    ``tool_result`` block inside them, and of a ``system`` list."""
    for field in ("messages", "input"):
        items = body.get(field)
        for i, item in enumerate(items if isinstance(items, list) else ()):
            content = item.get("content") if isinstance(item, dict) else None
            for j, part in enumerate(content if isinstance(content, list) else ()):
                yield f"{field}[{i}].content[{j}]", part
                inner = part.get("content") if isinstance(part, dict) else None
                for k, sub in enumerate(inner if isinstance(inner, list) else ()):
                    yield f"{field}[{i}].content[{j}].content[{k}]", sub
    system = body.get("system")
    for j, part in enumerate(system if isinstance(system, list) else ()):
        yield f"system[{j}]", part


def check_parts(body: Mapping[str, Any], limit: int) -> None:
    """At most ``limit`` content parts, each one's ``type`` a string (a list there was a 500
    in the tokenizer)."""
    for n, (param, part) in enumerate(_parts(body), 1):
        if n > limit:
            raise bad_request(f"The request has more than {limit} content parts.",
                              param=param, code="too_many_items")
        if isinstance(part, dict) and not isinstance(part.get("type", ""), str):
            raise bad_request(f"Invalid type for '{param}.type': expected a string, but got "
                              f"{type(part['type']).__name__} instead.", param=f"{param}.type",
                              code="invalid_type")


def check_request(protocol: str, body: Mapping[str, Any], limits: LimitsConfig,
                  raw: bytes | None = None, caller: str | None = None) -> None:
    """Every bound of a parsed request body; raises a 400 naming the field. The counts come
    first: they cost nothing, and the walks after them are bounded by them. ``raw``, the body
    it was parsed from, spares the depth walk when it has too few brackets to nest that deep
    (two ``bytes.count`` instead of a walk of every value: most requests). ``caller``: the
    request's credentials, under which its tool schemas that passed are remembered."""
    _count(body, "messages", limits.max_messages)
    _count(body, "input", limits.max_messages)
    _count(body, "tools", limits.max_tools)
    check_parts(body, limits.max_content_parts)
    if raw is None or raw.count(b"{") + raw.count(b"[") > limits.max_json_depth:
        check_depth(body, limits.max_json_depth)
    for field in ("stop", "stop_sequences"):
        stops = body.get(field)
        if isinstance(stops, list):
            _count(body, field, limits.max_stop_sequences)
            for i, s in enumerate(stops):
                if isinstance(s, str) and len(s) > limits.max_stop_sequence_chars:
                    raise bad_request(
                        f"Invalid '{field}[{i}]': at most {limits.max_stop_sequence_chars} "
                        "characters.", param=f"{field}[{i}]", code="invalid_value")
    for param, schema in _tool_schemas(protocol, body):
        check_tool_schema(schema, param, limits, caller=caller)
    for param, schema in _format_schemas(protocol, body):  # the same bounds as a tool's
        check_tool_schema(schema, param, limits, "schema", "invalid_json_schema", caller)


# Schemas that passed, per caller (``backends.memo``): a coding agent sends the same tool
# definitions at every turn, and the meta-schema check of Claude Code's 24 costs ~50 ms of CPU.
# A hit counts only under the limits it passed (the same config object, kept with it).
_PASSED: Memo[LimitsConfig] = Memo(16 << 20)


def check_tool_schema(schema: Any, param: str, limits: LimitsConfig, what: str = "tool schema",
                      code: str = "invalid_tool_schema", caller: str | None = None) -> None:
    """A tool's JSON schema: an object, valid JSON Schema, and cheap to generate values for."""
    if not isinstance(schema, dict):
        raise bad_request(f"Invalid '{param}': a JSON schema must be an object.", param=param,
                          code=code)
    if caller is None:
        _check_schema(schema, param, limits, what, code)
        return
    key = _schema_key(schema)
    if key is not None and _PASSED.get(caller, key) is limits:
        return
    _check_schema(schema, param, limits, what, code)
    if key is not None:
        _PASSED.put(caller, key, limits)


def _schema_key(schema: dict[str, Any]) -> bytes | None:
    try:
        return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # what orjson does not write (an integer past 64 bits): checked each time
        return None


def _check_schema(schema: dict[str, Any], param: str, limits: LimitsConfig, what: str,
                  code: str) -> None:
    check_depth(schema, limits.max_schema_depth, param)
    cost = _Cost(schema, param, limits, what, code)
    cost.enums()  # before the meta-schema walks a million-value enum
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _path(param, list(exc.absolute_path))
        raise bad_request(f"Invalid {what} at '{where}': {exc.message[:200]}",
                          param=where, code=code) from None
    cost.check()


def _path(param: str, parts: list[Any]) -> str:
    out = param
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


class _Cost:
    """The worst-case number of values ``schema_values`` would generate for a schema.

    Mirrors the generator: optional properties and random-length arrays are followed down to
    ``GENERATOR_DEPTH``; beyond it only what is mandatory (required properties, ``minItems``).
    A mandatory recursion through ``$ref`` is infinite and refused.
    """

    def __init__(self, root: dict[str, Any], param: str, limits: LimitsConfig,
                 what: str = "tool schema", code: str = "invalid_tool_schema") -> None:
        self.root = root
        self.param = param
        self.limits = limits
        self.what, self.code = what, code

    def check(self) -> None:
        total = self.size(self.root, self.param, 0)
        if total > self.limits.max_schema_values:
            self.fail(self.param, f"it asks for up to {total:.3g} generated values (at most "
                      f"{self.limits.max_schema_values})")

    def fail(self, where: str, why: str) -> None:
        raise bad_request(f"Invalid {self.what} at '{where}': {why}.", param=where,
                          code=self.code)

    def enums(self) -> None:
        """Any ``enum`` over the bound, found without looking inside it."""
        limit = self.limits.max_schema_enum
        stack: list[tuple[Any, str]] = [(self.root, self.param)]
        while stack:
            node, where = stack.pop()
            if isinstance(node, dict):
                enum = node.get("enum")
                if isinstance(enum, list) and len(enum) > limit:
                    self.fail(f"{where}.enum", f"{len(enum)} values, at most {limit}")
                stack.extend((v, f"{where}.{k}") for k, v in node.items()
                             if k != "enum" and isinstance(v, dict | list))
            else:
                stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node)
                             if isinstance(v, dict | list))

    def resolve(self, node: Any, where: str) -> Any:
        for _ in range(8):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            ref = node["$ref"]
            target: Any = self.root
            if ref.startswith("#"):
                for part in ref.lstrip("#").strip("/").split("/"):
                    if part:
                        target = target.get(part) if isinstance(target, dict) else None
            else:
                target = None
            node = target if isinstance(target, dict) else {}
        return {}

    def bounded(self, node: dict[str, Any], key: str, where: str, limit: int) -> int:
        value = node.get(key)
        if value is None:
            return 0
        n = int(value)
        if n > limit:
            self.fail(f"{where}.{key}", f"{n} is over the limit of {limit}")
        return n

    def size(self, node: Any, where: str, depth: int) -> float:
        if depth > self.limits.max_schema_depth:
            self.fail(where, f"values would nest deeper than {self.limits.max_schema_depth} "
                      "levels (a recursive $ref that is required?)")
        node = self.resolve(node, where)
        if not isinstance(node, dict):
            return 1.0
        lim = self.limits
        enum = node.get("enum")
        if isinstance(enum, list) and len(enum) > lim.max_schema_enum:
            self.fail(f"{where}.enum", f"{len(enum)} values, at most {lim.max_schema_enum}")
        if "const" in node or enum:
            return 1.0
        self.bounded(node, "minLength", where, lim.max_schema_string_length)
        self.bounded(node, "maxLength", where, 10**9)
        lo = self.bounded(node, "minItems", where, lim.max_schema_items)
        hi = self.bounded(node, "maxItems", where, lim.max_schema_items)
        for branch in ("anyOf", "oneOf"):
            parts = node.get(branch)
            if isinstance(parts, list) and parts:
                merged = {k: v for k, v in node.items() if k != branch}
                first = self.resolve(parts[0], where)
                merged.update(first if isinstance(first, dict) else {})
                return self.size(merged, f"{where}.{branch}[0]", depth + 1)
        total = 1.0
        for i, part in enumerate(node.get("allOf") or ()):
            total += self.size(part, f"{where}.allOf[{i}]", depth + 1)
        props = node.get("properties") or {}
        required = set(node.get("required") or ())
        for name, sub in props.items():
            if name in required or depth < GENERATOR_DEPTH:
                total += self.size(sub, f"{where}.properties.{name}", depth + 1)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        if kind == "array" or (kind is None and "items" in node and "properties" not in node):
            count = lo if depth >= GENERATOR_DEPTH else max(lo, hi or 3)
            if node.get("uniqueItems"):
                count *= 4  # the generator tries four candidates per unique item
            items = node.get("items", {})
            if isinstance(items, list):
                items = items[0] if items else {}
            if count:
                total += count * self.size(items, f"{where}.items", depth + 1)
        return total
