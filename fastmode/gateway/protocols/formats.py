"""Structured outputs and strict tools, as every protocol reads them from its wire format.

Chat's ``response_format``, the Responses API's ``text.format`` and Anthropic's
``output_config.format`` (or the beta ``output_format``) all become one ``ResponseFormat`` for
the mock model, after the same check (``backends.mockmodel.check_schema``): a schema outside
the supported subset is a 400 naming the keyword and where it is, in OpenAI's words
(``Invalid schema for response_format 'person': In context=('properties', 'zip'), 'foo' is
not permitted.``). Function tools marked ``strict`` are checked the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fastmode.backends.mockmodel import ResponseFormat, SchemaRejected, ToolSpec, check_schema
from fastmode.gateway.errors import APIError, bad_request


def structured(kind: str, schema: Any, name: str, strict: bool, what: str,
               param: str) -> ResponseFormat | None:
    """The ``ResponseFormat`` of a request (None for plain text); 400 if the schema is out of
    the subset. ``what`` names it in the message (``response_format 'person'``)."""
    if kind == "text":
        return None
    if kind == "json_object" or schema is None:  # a json_schema without a schema: any object
        return ResponseFormat("json_object")
    reject(schema, strict, what, param)
    return ResponseFormat("json_schema", schema, name, strict)


def reject(schema: Any, strict: bool, what: str, param: str) -> None:
    """400 unless ``schema`` is in the supported subset (strict or not)."""
    try:
        check_schema(schema, strict=strict)
    except SchemaRejected as exc:
        raise APIError(400, f"Invalid schema for {what}: {exc}", param=param,
                       code="invalid_json_schema") from None


def strict_tools(tools: Iterable[tuple[ToolSpec, bool, str]]) -> None:
    """Check the parameters of every tool marked strict: (spec, strict, param)."""
    for spec, strict, param in tools:
        if strict:
            schema = spec.parameters or {"type": "object", "properties": {}}
            reject(_closed(schema), True, f"function '{spec.name}'", param)


def _closed(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Tool parameters are an object even when ``type`` is left out."""
    return schema if "type" in schema else {"type": "object", **schema}


def mentions_json(texts: Iterable[str]) -> bool:
    return any("json" in t.lower() for t in texts)


def json_word_required(param: str, field: str) -> APIError:
    """OpenAI refuses ``json_object`` mode unless the conversation asks for JSON (otherwise a
    model may emit whitespace until its cap)."""
    return bad_request(f"'{param}' must contain the word 'json' in some form, to use "
                       f"'{field}' of type 'json_object'.", param=param)
