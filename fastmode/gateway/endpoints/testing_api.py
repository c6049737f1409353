"""The per-test API: what the pytest plugin sets before a test and reads after it.

Admin (``[admin]`` key, like ``/admin/faults``):

- ``POST /admin/tests/{test_id}/replies`` ``{"match", "text" | "tool_call": {"name",
  "arguments"} | "json", "times"}`` — a scripted reply for that test (first match wins);
- ``POST /admin/tests/{test_id}/faults`` ``{"kind", "times", "after", "s", "tier", "model"}`` —
  a fault its next ``times`` matching requests get, counted (no probability);
- ``POST /admin/tests/{test_id}/cassette`` ``{"path", "mode"}`` — its exchanges recorded to, or
  replayed from, a cassette file (``gateway.cassettes.scoped``);
- ``GET /admin/tests/{test_id}`` — its replies (with their uses), faults, journal and cassette;
- ``DELETE /admin/tests/{test_id}`` — forget it.

Any key: ``GET /v1/fastmode/journal?test_id=ID`` — that test's requests made with the caller's
key (the admin key sees all; ownership as for traces).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.requests import Request
from starlette.responses import Response

from fastmode.gateway.cassettes.library import CassetteError
from fastmode.gateway.cassettes.scoped import MODES, TestCassettes
from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.fault_kinds import Kind
from fastmode.gateway.http.json_body import parse_json
from fastmode.gateway.stored.ownership import Caller, caller
from fastmode.gateway.testing.journal import entry
from fastmode.gateway.testing.scopes import CountedFault, ReplyRule, TestScopes
from fastmode.gateway.values.fault_spec import Fault


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallBody(_Strict):
    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ReplyBody(_Strict):
    match: str = Field(min_length=1, max_length=4096)
    text: str | None = None
    tool_call: ToolCallBody | None = None
    json_value: Any = Field(None, alias="json")
    times: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one(self) -> ReplyBody:
        given = [self.text is not None, self.tool_call is not None, self.json_value is not None]
        if sum(given) != 1:
            raise ValueError("exactly one of text, tool_call or json")
        return self


class CassetteBody(_Strict):
    path: str = Field(min_length=1, max_length=4096)
    mode: str = "once"


class FaultBody(_Strict):
    kind: Kind
    times: int = Field(1, ge=1, le=1_000_000)
    after: int = Field(0, ge=0)
    s: float | None = Field(None, ge=0, le=3600)
    tier: str | None = None
    model: str | None = None


def _parse(model: type[BaseModel], raw: bytes) -> Any:
    try:
        return model.model_validate(parse_json(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or "body"
        raise bad_request(f"Invalid value for '{param}': {err['msg']}.", param=param) from None


def _reply_rule(body: ReplyBody) -> ReplyRule:
    import re

    try:
        re.compile(body.match)
    except re.error as exc:
        raise bad_request(f"Invalid value for 'match': not a regex ({exc}).",
                          param="match") from None
    call = body.tool_call
    return ReplyRule(body.match, body.text, call.name if call else None,
                     call.arguments if call else None, body.json_value, body.times)


def _json(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status, media_type="application/json")


def _error(exc: APIError) -> Response:
    return Response(orjson.dumps(exc.body()), exc.status, headers=exc.headers,
                    media_type="application/json")


def journal(tests: TestScopes, test_id: str, who: Caller) -> list[dict[str, Any]]:
    scope = tests.get(test_id)
    if scope is None:
        return []
    return [entry(job, request, scripted, at) for job, request, scripted, at in scope.journal
            if who.may_see(job.principal.id if job.principal is not None else None)]


class _Routes:
    """The per-test routes' handlers over one gateway's test scopes and cassettes."""

    def __init__(self, tests: TestScopes, cassettes: TestCassettes | None) -> None:
        self.tests, self.cassettes = tests, cassettes

    @staticmethod
    def check(request: Request) -> None:
        if not request.app.state.gateway.is_admin(request.headers):
            raise APIError(401, "The admin API needs `Authorization: Bearer <admin key>`.",
                           code="invalid_admin_key")

    async def add_reply(self, request: Request) -> Response:
        try:
            self.check(request)
            rule = _reply_rule(_parse(ReplyBody, await request.body()))
        except APIError as exc:
            return _error(exc)
        self.tests.open(request.path_params["test_id"]).replies.append(rule)
        return _json(rule.as_dict(), 201)

    async def add_fault(self, request: Request) -> Response:
        try:
            self.check(request)
            body = _parse(FaultBody, await request.body())
            if body.tier is not None and body.tier not in request.app.state.gateway.spec.tiers:
                raise bad_request(f"Invalid value for 'tier': unknown tier {body.tier!r}.",
                                  param="tier")
        except APIError as exc:
            return _error(exc)
        fault = Fault(body.kind, 1.0, body.after, body.s, "test", body.tier, None, body.model)
        self.tests.open(request.path_params["test_id"]).faults.append(CountedFault(fault, body.times))
        return _json({**fault.as_dict(), "times": body.times}, 201)

    async def add_cassette(self, request: Request) -> Response:
        test_id = request.path_params["test_id"]
        try:
            self.check(request)
            body = _parse(CassetteBody, await request.body())
            if body.mode not in MODES:
                raise bad_request(f"Invalid value for 'mode': {body.mode!r}; expected one of "
                                  f"{', '.join(MODES)}.", param="mode")
            if self.cassettes is None:
                raise bad_request("Cassettes need the admin API on.", param="path")
            try:
                cassette = self.cassettes.open(test_id, body.path, body.mode)
            except (CassetteError, OSError) as exc:
                raise bad_request(str(exc), param="path") from None
        except APIError as exc:
            return _error(exc)
        self.tests.open(test_id)  # a journal for the test (replayed requests are in it too)
        return _json(cassette.as_dict(), 201)

    async def show(self, request: Request) -> Response:
        try:
            self.check(request)
        except APIError as exc:
            return _error(exc)
        test_id = request.path_params["test_id"]
        scope = self.tests.get(test_id)
        cassette = self.cassettes.get(test_id) if self.cassettes is not None else None
        if scope is None:
            return _json({"test_id": test_id, "replies": [], "faults": [], "journal": [],
                          "cassette": cassette.as_dict() if cassette is not None else None})
        return _json({
            "test_id": test_id,
            "replies": [r.as_dict() for r in scope.replies],
            "faults": [{**f.fault.as_dict(), "times": f.times, "used": f.used}
                       for f in scope.faults],
            "journal": journal(self.tests, test_id, Caller(None, sees_all=True)),
            "cassette": cassette.as_dict() if cassette is not None else None,
        })

    async def forget(self, request: Request) -> Response:
        try:
            self.check(request)
        except APIError as exc:
            return _error(exc)
        test_id = request.path_params["test_id"]
        had = self.cassettes.clear(test_id) if self.cassettes is not None else False
        return _json({"deleted": self.tests.clear(test_id) or had})

    async def public_journal(self, request: Request) -> Response:
        gateway = request.app.state.gateway
        try:
            who = caller(gateway.auth, request.headers, admin=gateway.is_admin(request.headers))
            test_id = request.query_params.get("test_id", "")
            if not test_id:
                raise bad_request("Missing required parameter: 'test_id'.", param="test_id")
        except APIError as exc:
            return _error(exc)
        return _json({"object": "list", "data": journal(self.tests, test_id, who)})



def add_routes(app: FastAPI, tests: TestScopes, admin: bool,
               cassettes: TestCassettes | None = None) -> None:
    routes = _Routes(tests, cassettes)
    if admin:
        app.add_api_route("/admin/tests/{test_id}/replies", routes.add_reply, methods=["POST"])
        app.add_api_route("/admin/tests/{test_id}/faults", routes.add_fault, methods=["POST"])
        app.add_api_route("/admin/tests/{test_id}/cassette", routes.add_cassette, methods=["POST"])
        app.add_api_route("/admin/tests/{test_id}", routes.show, methods=["GET"])
        app.add_api_route("/admin/tests/{test_id}", routes.forget, methods=["DELETE"])
    for prefix in ("/v1", "/fast/v1"):
        app.add_api_route(prefix + "/fastmode/journal", routes.public_journal, methods=["GET"])
