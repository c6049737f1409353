"""Bounds on everything a client controls, checked before the work.

Three layers, each as early as it can be:

* **the HTTP head** (``BoundedHttpTools``): uvicorn's httptools protocol buffers a request's
  head without limit; this subclass counts the bytes of the head as they arrive and answers
  431 once they pass ``limits.max_header_bytes``, before the rest is buffered;
* **the body** (``BodyLimit``, ASGI middleware): a declared ``content-length`` over
  ``limits.max_body_bytes`` is answered 413 before a byte of the body is read; a chunked body
  is counted as it arrives and refused the moment it passes the bound;
* **the parsed request** (``check_request``): JSON nesting depth (iteratively, so a 1,000-deep
  object is a 400, not a ``RecursionError``), message / tool / stop-sequence counts, and every
  tool's JSON schema: valid against the JSON Schema meta-schema (``jsonschema``), and bounded in
  the keywords that drive value generation (``minItems``, ``maxItems``, ``minLength``, enum
  size, nesting, and the worst-case number of values a schema asks for), so that no schema makes
  generation slow. Each refusal is a 400 naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httptools
import orjson
from jsonschema import Draft202012Validator, SchemaError
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import LimitsConfig
from .errors import APIError, bad_request
from .ids import new_id

LINGER_S = 1.0  # a refused head: further bytes are dropped this long before the close
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
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
                    await self.answer(scope["path"], error)(scope, receive, send)
                    return
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


class _HeadTooLarge(Exception):
    """Raised inside the parser's headers-complete callback to stop before any dispatch."""


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on the request head (431 past it).

    The head is counted from the first byte of a request: a chunk that leaves it incomplete
    counts whole; the chunk that completes it counts up to the blank line that ends it (so a
    body that arrived with its head does not count), checked in the headers-complete callback,
    before the request is dispatched to the app. The parser has seen at most the bound plus one
    read (asyncio reads at most 256 KiB) when the 431 goes out. ``max_header_bytes`` is set by
    ``fastmode serve``.
    """

    max_header_bytes = 32 * 1024

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._in_head = True  # between a message's first byte and its headers' end
        self._head = 0  # bytes of the current head in earlier chunks
        self._tail = b""  # the last bytes of the previous chunk (a split blank line)
        self._chunk = b""  # the chunk being parsed
        self._path = b""  # from the request line, for the error format of the route
        self._refused = False
        self._heads = 0  # heads completed on this connection

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head, self._tail = True, 0, b""

    def on_headers_complete(self) -> None:
        seen = self._tail + self._chunk
        end = seen.find(b"\r\n\r\n")
        size = self._head + (end + 4 - len(self._tail) if end >= 0 else len(self._chunk))
        self._in_head, self._head, self._tail = False, 0, b""
        self._heads += 1
        if size > self.max_header_bytes:
            raise _HeadTooLarge()  # before the request is dispatched
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        """uvicorn's, with the head counted and a 431 instead of a dispatch past the bound."""
        if self._refused:
            return  # the rest of a refused request: read and dropped (a lingering close)
        if self._in_head and not self._head:  # "METHOD /path HTTP/1.1" starts the head
            self._path = data[:2048].split(b" ", 2)[1] if data.count(b" ", 0, 2048) >= 2 else b""
        self._unset_keepalive_if_required()
        self._chunk = data
        was_in_head, heads = self._in_head, self._heads
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._refuse()
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        finally:
            self._chunk = b""
        if was_in_head and heads == self._heads:  # no head ended here: the chunk counts whole
            self._head += len(data)
            self._tail = data[-3:]
            if self._head > self.max_header_bytes:
                self._refuse()

    def _refuse(self) -> None:
        from .protocols import for_path  # the route's own error format (OpenAI's, Anthropic's)

        error = APIError(
            431, f"The request's headers are larger than {self.max_header_bytes} bytes.",
            code="request_header_fields_too_large")
        path = self._path.split(b"?", 1)[0].decode("latin-1")
        body = orjson.dumps(for_path(path).error_body(error, new_id("req")))
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json"
            b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
            + body)
        # a lingering close: closing while the client still sends its head would reset the
        # connection before it reads the 431; drop what comes for a second, then close
        self._refused = True
        self.loop.call_later(LINGER_S, self.transport.close)


# -- the parsed request --------------------------------------------------------------------


def check_depth(value: Any, max_depth: int, param: str = "body") -> None:
    """400 if ``value`` nests objects/arrays deeper than ``max_depth`` (iterative walk)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise bad_request(f"The request nests objects or arrays deeper than {max_depth} "
                              "levels.", param=param, code="nesting_too_deep")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))


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


def check_request(protocol: str, body: Mapping[str, Any], limits: LimitsConfig) -> None:
    """Every bound of a parsed request body; raises a 400 naming the field."""
    check_depth(body, limits.max_json_depth)
    _count(body, "messages", limits.max_messages)
    _count(body, "input", limits.max_messages)
    _count(body, "tools", limits.max_tools)
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
        check_tool_schema(schema, param, limits)


def check_tool_schema(schema: Any, param: str, limits: LimitsConfig) -> None:
    """A tool's JSON schema: an object, valid JSON Schema, and cheap to generate values for."""
    if not isinstance(schema, dict):
        raise bad_request(f"Invalid '{param}': a JSON schema must be an object.", param=param,
                          code="invalid_tool_schema")
    check_depth(schema, limits.max_schema_depth, param)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _path(param, list(exc.absolute_path))
        raise bad_request(f"Invalid tool schema at '{where}': {exc.message[:200]}",
                          param=where, code="invalid_tool_schema") from None
    _Cost(schema, param, limits).check()


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

    def __init__(self, root: dict[str, Any], param: str, limits: LimitsConfig) -> None:
        self.root = root
        self.param = param
        self.limits = limits

    def check(self) -> None:
        total = self.size(self.root, self.param, 0)
        if total > self.limits.max_schema_values:
            self.fail(self.param, f"it asks for up to {total:.3g} generated values (at most "
                      f"{self.limits.max_schema_values})")

    def fail(self, where: str, why: str) -> None:
        raise bad_request(f"Invalid tool schema at '{where}': {why}.", param=where,
                          code="invalid_tool_schema")

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
