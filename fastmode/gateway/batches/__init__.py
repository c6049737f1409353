"""Batches: OpenAI's Batch API (``/v1/files`` + ``/v1/batches``) and Anthropic's Message
Batches (``/v1/messages/batches``), run on the modeled batch pool (``backends.batch_pool``)
at its derived price (docs/batches.md).

``Batches.submit`` is the one path of both APIs: each line answered by its endpoint's protocol
(``runner.prepare``), the answered ones timed on the pool of their model's standard tier run at
``[batches] max_batch``, and the batch kept until the modeled pool is done (``store``).
"""

from __future__ import annotations

from fastapi import FastAPI

from fastmode.gateway.batches import anthropic_api, openai_api
from fastmode.gateway.batches.service import Batches
from fastmode.gateway.pipeline.admission import Gateway

__all__ = ["Batches", "add_routes"]


def add_routes(app: FastAPI, gateway: Gateway) -> Batches:
    batches = Batches(gateway)
    app.state.batches = batches
    openai_api.add_routes(app, batches)
    anthropic_api.add_routes(app, batches)
    return batches
