"""The admin API (``/admin/...``): fault rules at run time, and the raw ledger.

Off unless ``[admin] enabled = true``; every call needs ``Authorization: Bearer <admin.key>``
(a key of its own, not an API key). Fault rules are kept in the shared state (namespace
``faults``), so every gateway process sharing the state applies them. A rule may be scoped to a
test id (the ``test_id`` field, or the ``x-fastmode-test-id`` header of the admin call): it then
applies only to requests that carry the same ``x-fastmode-test-id``, so parallel tests don't see
each other's faults.

- ``POST /admin/faults`` ``{"kind", "p", "after", "s", "tier", "key", "model", "name",
  "test_id"}`` → the rule with its ``name`` (generated if absent); a rule's ``key`` (an API key,
  or its id as ``/v1/usage`` shows it) is kept as the key's id;
- ``GET /admin/faults[?test_id=]`` → ``{"data": [rules]}``;
- ``DELETE /admin/faults[?test_id=]`` (all, or one scope), ``DELETE /admin/faults/{name}``;
- ``GET /admin/ledger[?since=UNIX&limit=N]`` → the raw ledger rows (flushed first).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from fastmode.gateway.config import FaultRule
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.faults import NAMESPACE, TEST_ID_HEADER
from fastmode.gateway.http.json_body import parse_json
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.pipeline.admission import Gateway
from fastmode.gateway.stored.ownership import is_key_id, key_id
from fastmode.gateway.values.ids import new_id

MAX_RULES = 1000


class AdminRule(FaultRule):
    name: str | None = Field(None, min_length=1, max_length=128)
    test_id: str | None = Field(None, max_length=256)


def _check(gateway: Gateway, request: Request) -> None:
    if not gateway.is_admin(request.headers):
        raise APIError(401, "The admin API needs `Authorization: Bearer <admin key>`.",
                       code="invalid_admin_key")


def _scope(request: Request, explicit: str | None = None) -> str | None:
    return explicit or request.query_params.get("test_id") or request.headers.get(TEST_ID_HEADER)


def add_routes(app: FastAPI, gateway: Gateway) -> None:
    state = gateway.state

    async def add_fault(request: Request) -> Response:
        _check(gateway, request)
        try:
            rule = AdminRule.model_validate(parse_json(await request.body()))
        except ValidationError as exc:
            err = exc.errors()[0]
            param = ".".join(str(p) for p in err["loc"]) or "body"
            raise bad_request(f"Invalid value for '{param}': {err['msg']}.", param=param) from None
        if rule.tier is not None and rule.tier not in gateway.spec.tiers:
            raise bad_request(f"Invalid value for 'tier': unknown tier {rule.tier!r}.",
                              param="tier")
        if len(state.settings(NAMESPACE)) >= MAX_RULES:
            raise bad_request(f"At most {MAX_RULES} fault rules; delete some first.")
        name = rule.name or new_id("fault")
        scope = _scope(request, rule.test_id) or ""
        value = rule.model_dump(exclude={"name", "test_id"}, exclude_none=True)
        if "key" in value and not is_key_id(value["key"]):
            value["key"] = key_id(value["key"])  # kept in the state: the key's id, not the key
        await state.put_setting(NAMESPACE, scope, name, value)
        return json_response({"name": name, "test_id": scope or None, **value}, 201)

    async def list_faults(request: Request) -> Response:
        _check(gateway, request)
        scope = _scope(request)
        rules: list[dict[str, Any]] = [
            {"name": name, "test_id": sc or None, **value}
            for (sc, name), value in sorted(state.settings(NAMESPACE, scope).items())]
        return json_response({"object": "list", "data": rules})

    async def clear_faults(request: Request) -> Response:
        _check(gateway, request)
        n = await state.delete_settings(NAMESPACE, _scope(request))
        return json_response({"deleted": n})

    async def delete_fault(request: Request) -> Response:
        _check(gateway, request)
        name = request.path_params["name"]
        n = sum([await state.delete_settings(NAMESPACE, scope, name)
                 for scope, nm in list(state.settings(NAMESPACE)) if nm == name])
        if not n:
            raise APIError(404, f"No fault rule named {name!r}.", code="not_found")
        return json_response({"deleted": n})

    async def ledger(request: Request) -> Response:
        _check(gateway, request)
        try:
            since = float(request.query_params.get("since", 0))
            limit = min(100_000, int(request.query_params.get("limit", 10_000)))
        except ValueError:
            raise bad_request("'since' and 'limit' must be numbers.") from None
        rows = await state.usage_rows(since=since, limit=max(1, limit))
        return json_response({"object": "list", "data": [r.as_dict() for r in rows]})

    app.add_api_route("/admin/faults", add_fault, methods=["POST"])
    app.add_api_route("/admin/faults", list_faults, methods=["GET"])
    app.add_api_route("/admin/faults", clear_faults, methods=["DELETE"])
    app.add_api_route("/admin/faults/{name}", delete_fault, methods=["DELETE"])
    app.add_api_route("/admin/ledger", ledger, methods=["GET"])
