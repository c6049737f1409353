"""The Responses API's tools as the mock model's ``ToolSpec``s: every type the API defines.

Tools are declared in ``tools`` and, by newer clients (Codex with its gpt-6.x models), in
``additional_tools`` input items and in the ``tools`` a ``tool_search_output`` item loaded; all
of them are read here, with the same checks, each 400 naming its place in the request.

- ``function``: arguments are JSON fitting ``parameters``.
- ``custom``: a freeform tool (``apply_patch``, Codex's ``exec``) whose input is raw text,
  optionally constrained by a Lark or regex grammar (``format``); called with a
  ``custom_tool_call`` item.
- ``namespace``: a named group of function and custom tools, flattened into specs that keep
  the namespace, so a call to one of them is echoed back in it.
- Hosted tools (web search, file search, code interpreter, MCP, shells, ...) run on OpenAI's
  side. fastmode simulates none of them: they are accepted, checked for the fields the API
  requires, and kept out of the specs, so the mock model never calls them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, StrictBool

from fastmode.backends.mockmodel import ToolSpec
from fastmode.backends.mockmodel.request import CUSTOM
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.protocols.base import Lenient, validate

# hosted tool type -> the fields the API requires of it (openai-python's ``ToolParam`` union)
HOSTED_REQUIRED: dict[str, tuple[str, ...]] = {
    "file_search": ("vector_store_ids",),
    "computer": (),
    "computer_use_preview": ("display_height", "display_width", "environment"),
    "web_search": (),
    "web_search_2025_08_26": (),
    "web_search_preview": (),
    "web_search_preview_2025_03_11": (),
    "mcp": ("server_label",),
    "code_interpreter": ("container",),
    "programmatic_tool_calling": (),
    "image_generation": (),
    "local_shell": (),
    "shell": (),
    "tool_search": (),
    "apply_patch": (),
}
TOOL_TYPES = ("function", "custom", "namespace", *HOSTED_REQUIRED)
NAMESPACED_TYPES = ("function", "custom")  # what a namespace may hold


class FunctionTool(Lenient):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class GrammarInput(Lenient):
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str


class CustomTool(Lenient):
    type: Literal["custom"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    format: dict[str, Any] | None = None  # {type: text} | GrammarInput (``_grammar``)


class NamespaceTool(Lenient):
    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=64)
    description: str
    tools: list[dict[str, Any]] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Declared:
    """The tools of one request: what the model may call, which function tools are strict (for
    the schema check: spec, strict, param) and the raw declarations (counted as prompt)."""

    specs: tuple[ToolSpec, ...] = ()
    strict: tuple[tuple[ToolSpec, bool, str], ...] = ()
    raw: tuple[dict[str, Any], ...] = ()
    hosted: tuple[str, ...] = ()  # the hosted tool types declared (never called)


def declared(groups: Iterable[tuple[Sequence[Any], str]]) -> Declared:
    """Every tool of ``groups``: (a list of tool declarations, where it is in the request)."""
    specs: list[ToolSpec] = []
    strict: list[tuple[ToolSpec, bool, str]] = []
    raw: list[dict[str, Any]] = []
    hosted: list[str] = []
    for tools, where in groups:
        for i, tool in enumerate(tools):
            at = f"{where}[{i}]"
            kind = tool_type(tool, at, TOOL_TYPES)
            raw.append(tool)
            if kind == "namespace":
                ns = validate(NamespaceTool, tool, at)
                for j, inner in enumerate(ns.tools):
                    _spec(inner, f"{at}.tools[{j}]", ns.name, specs, strict)
            elif kind in HOSTED_REQUIRED:
                _hosted(tool, kind, at)
                hosted.append(kind)
            else:
                _spec(tool, at, "", specs, strict)
    return Declared(tuple(specs), tuple(strict), tuple(raw), tuple(hosted))


def tool_type(tool: Any, at: str, allowed: Sequence[str]) -> str:
    if not isinstance(tool, dict):
        raise bad_request(f"Invalid type for '{at}': expected an object, but got "
                          f"{type(tool).__name__} instead.", param=at, code="invalid_type")
    kind = tool.get("type")
    if kind is None:
        raise APIError(400, f"Missing required parameter: '{at}.type'.", param=f"{at}.type",
                       code="missing_required_parameter")
    if kind not in allowed:
        supported = ", ".join(f"'{t}'" for t in allowed)
        raise bad_request(f"Invalid value: '{kind}'. Supported values are: {supported}.",
                          param=f"{at}.type", code="invalid_value")
    return str(kind)


def _spec(tool: Any, at: str, namespace: str, specs: list[ToolSpec],
          strict: list[tuple[ToolSpec, bool, str]]) -> None:
    kind = tool_type(tool, at, NAMESPACED_TYPES) if namespace else tool["type"]
    if kind == "custom":
        custom = validate(CustomTool, tool, at)
        grammar = _grammar(custom.format, f"{at}.format")
        specs.append(ToolSpec(custom.name, custom.description or "", {}, CUSTOM, namespace,
                              grammar))
        return
    fn = validate(FunctionTool, tool, at)
    spec = ToolSpec(fn.name, fn.description or "", fn.parameters or {}, namespace=namespace)
    specs.append(spec)
    strict.append((spec, bool(fn.strict), f"{at}.parameters"))


def _grammar(fmt: dict[str, Any] | None, at: str) -> str:
    """A custom tool's grammar definition ("" for unconstrained text)."""
    if fmt is None or tool_type(fmt, at, ("text", "grammar")) == "text":
        return ""
    grammar: GrammarInput = validate(GrammarInput, fmt, at)
    return grammar.definition


def _hosted(tool: dict[str, Any], kind: str, at: str) -> None:
    for name in HOSTED_REQUIRED[kind]:
        if tool.get(name) is None:
            raise APIError(400, f"Missing required parameter: '{at}.{name}'.",
                           param=f"{at}.{name}", code="missing_required_parameter")


def carried_tools(items: str | Sequence[Any]) -> list[dict[str, Any]]:
    """The tools the request's ``additional_tools`` items declare (a later turn continuing
    this one with ``previous_response_id`` still has them)."""
    if isinstance(items, str):
        return []
    return [t for item in items if isinstance(item, dict) and item.get("type") ==
            "additional_tools" and isinstance(item.get("tools"), list) for t in item["tools"]]


def tool_groups(tools: Sequence[Any] | None,
                items: str | Sequence[Any]) -> list[tuple[Sequence[Any], str]]:
    """The request's tool declarations: ``tools``, then those ``additional_tools`` and
    ``tool_search_output`` input items carry (in input order: each item's tools are available
    from that item on, and the mock model reads the whole conversation at once)."""
    groups: list[tuple[Sequence[Any], str]] = [(tools, "tools")] if tools else []
    if isinstance(items, str):
        return groups
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind not in ("additional_tools", "tool_search_output"):
            continue
        carried = item.get("tools")
        if not isinstance(carried, list):
            raise APIError(400, f"Missing required parameter: 'input[{i}].tools'.",
                           param=f"input[{i}].tools", code="missing_required_parameter")
        if kind == "additional_tools" and item.get("role") != "developer":
            raise bad_request(f"Invalid value for 'input[{i}].role': {item.get('role')!r}; "
                              "only 'developer' may provide additional tools.",
                              param=f"input[{i}].role", code="invalid_value")
        groups.append((carried, f"input[{i}].tools"))
    return groups
