"""Stored Chat Completions (``store: true``), as one caller sees them.

A chat completion created with ``store: true`` is kept with its request's messages and
``metadata`` (``gateway.state.objects``, on the shared state: any gateway process answers),
owned by the key that made it (``gateway.stored.ownership``): its owner sees it, another key gets the
404 of an unknown id, the admin key sees every key's, and with auth off everyone sees all.
``gateway.endpoints.stored_chat_api`` serves it: retrieve, update ``metadata``, delete, list (``model``
and ``metadata`` filters) and the request's messages.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.pages import page
from fastmode.gateway.state import StateBackend
from fastmode.gateway.state.objects import StoredObject, objects_of
from fastmode.gateway.stored.ownership import Caller

KIND = "chat.completion"


def not_found(cid: str) -> APIError:
    return APIError(404, f"Chat completion with id '{cid}' not found.", param="completion_id",
                    code="not_found")


def _text(content: Any) -> str | None:
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content
                       if isinstance(p, Mapping) and p.get("type") == "text")
    return None


def store_messages(cid: str, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A request's messages as ``GET .../messages`` lists them: each with an id, the text as
    ``content`` and the parts, when the message gave parts, as ``content_parts``."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        msg: dict[str, Any] = {
            "id": f"{cid}-{i}",
            "role": m.get("role"),
            "content": _text(content),
            "content_parts": [dict(p) for p in content] if isinstance(content, list) else None,
        }
        for key in ("name", "tool_calls", "tool_call_id"):
            if m.get(key) is not None:
                msg[key] = m[key]
        out.append(msg)
    return out


def metadata_filter(params: Mapping[str, str]) -> dict[str, str]:
    """``metadata[key]=value`` query parameters (how the SDKs send a metadata filter)."""
    out = {}
    for key, value in params.items():
        if key.startswith("metadata[") and key.endswith("]"):
            out[key[len("metadata["):-1]] = value
    return out


def check_metadata(value: Any, param: str = "metadata") -> dict[str, str]:
    """OpenAI's metadata: at most 16 string pairs, keys up to 64 characters, values 512."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > 16 or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in value.items()):
        raise bad_request(f"Invalid '{param}': an object of at most 16 string values (keys "
                          "up to 64 characters, values up to 512).", param=param)
    return dict(value)


class StoredChats:
    """The stored chat completions as ``caller`` sees them."""

    def __init__(self, state: StateBackend, caller: Caller) -> None:
        self.objects = objects_of(state)
        self.caller = caller

    def keep(self, completion: dict[str, Any], messages: Sequence[Mapping[str, Any]],
             metadata: dict[str, str]) -> None:
        """Store a completion just made (write-behind: called as its turn completes)."""
        body = {"completion": {**completion, "metadata": metadata},
                "messages": store_messages(completion["id"], messages)}
        self.objects.put(StoredObject(KIND, completion["id"], self.caller.owner, time.time(),
                                      body))

    async def _item(self, cid: str) -> StoredObject:
        item = await self.objects.get(KIND, cid)
        if item is None or not self.caller.may_see(item.owner):
            raise not_found(cid)
        return item

    async def get(self, cid: str) -> dict[str, Any]:
        completion: dict[str, Any] = (await self._item(cid)).body["completion"]
        return completion

    async def messages(self, cid: str, params: Mapping[str, str]) -> dict[str, Any]:
        return page(list((await self._item(cid)).body["messages"]), params)

    async def update(self, cid: str, metadata: dict[str, str]) -> dict[str, Any]:
        """Replace the completion's ``metadata`` (the only field that can be updated)."""
        item = await self._item(cid)
        item.body["completion"]["metadata"] = metadata
        self.objects.put(item)
        completion: dict[str, Any] = item.body["completion"]
        return completion

    async def delete(self, cid: str) -> None:
        await self._item(cid)
        if not await self.objects.delete(KIND, cid):
            raise not_found(cid)

    async def list(self, params: Mapping[str, str]) -> dict[str, Any]:
        """The caller's completions, filtered by ``model`` and ``metadata[KEY]``."""
        everyone = self.caller.sees_all
        items = await self.objects.owned(KIND, self.caller.owner, everyone)
        model = params.get("model")
        wanted = metadata_filter(params)
        out = []
        for item in items:
            c = item.body["completion"]
            meta = c.get("metadata") or {}
            if model and c.get("model") != model:
                continue
            if any(meta.get(k) != v for k, v in wanted.items()):
                continue
            out.append(c)
        return page(out, params)
