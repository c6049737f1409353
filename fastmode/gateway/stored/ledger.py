"""The usage ledger: one row per request, written off the hot path, and ``GET /v1/usage``.

Settlement hands each admitted job's row to the state backend (``gateway.state``), which
buffers it and writes it in a batch within about a second; a request refused before any work
(rate limit, overload, an injected error status) gets a row too, with no tier served and no
tokens. ``GET /v1/usage`` returns the totals of admitted requests per API key and tier
(``?group_by=day`` for a per-day breakdown); with auth on, a key sees only its own usage, and
the admin key (``[admin]``) everyone's. Keys are named by their id (``gateway.stored.ownership``:
a hash), in the rows and the totals alike: the ledger never holds a key.
"""

from __future__ import annotations

import time

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.state import REJECTED, StateBackend, UsageRow
from fastmode.gateway.values.job import Job
from fastmode.gateway.values.key_ids import key_id
from fastmode.gateway.values.request import TurnRequest


def billed_reasoning(job: Job) -> int:
    """The reasoning tokens among the billed output: reasoning comes first, so a reply cut
    short was billed for its reasoning up to the cut, and none of its visible text before."""
    return min(job.gen.reasoning_tokens, job.billed_output)


def job_row(job: Job, status: int) -> UsageRow:
    """The ledger row of a settled job."""
    return UsageRow(
        request_id=job.id,
        ts=time.time(),
        api_key=job.principal.id if job.principal is not None else "",
        model=job.model,
        tier_requested=job.requested_tier,
        tier_served=job.tier.name,
        protocol=job.protocol,
        transport=job.transport,
        status=status,
        ended=job.ended,
        input_tokens=job.prompt_tokens,
        cached_input_tokens=job.cached_tokens,
        output_tokens=job.billed_output,
        reasoning_tokens=billed_reasoning(job),
        generated_tokens=job.generated,
        cost_usd=job.cost_usd,
        fault=job.fault,
        detail=job.detail,
    )


def rejection_row(request_id: str, turn: TurnRequest, error: APIError, *, protocol: str,
                  transport: str, tier: str, api_key: str, fault: str | None) -> UsageRow:
    """The ledger row of a request refused before any work: nothing billed. ``api_key`` is
    the request's key ("" if none was accepted); the row keeps its id."""
    return UsageRow(
        request_id=request_id, ts=time.time(), api_key=key_id(api_key) if api_key else "",
        model=turn.model,
        tier_requested=tier, tier_served=None, protocol=protocol, transport=transport,
        status=error.status, ended=REJECTED, fault=fault,
        detail=None if error.code is None else str(error.code),
    )


def add_routes(app: FastAPI, state: StateBackend) -> None:
    async def usage(request: Request) -> Response:

        gateway = request.app.state.gateway
        group = request.query_params.get("group_by")
        if group not in (None, "", "day"):
            raise bad_request("Invalid value for 'group_by': expected 'day'.", param="group_by")
        key: str | None = None  # None: every key's
        if not gateway.is_admin(request.headers):
            principal = gateway.auth.authenticate(request.headers.get("authorization"))
            key = principal.id if principal is not None else None
        totals = await state.usage_totals(per_day=group == "day", api_key=key)
        return json_response({"object": "list", "data": [t.as_dict() for t in totals]})

    for prefix in ("/v1", "/fast/v1"):
        app.add_api_route(prefix + "/usage", usage, methods=["GET"])
