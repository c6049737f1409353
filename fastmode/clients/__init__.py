"""fastmode's Python client: streaming over HTTP or one websocket, typed events, summaries.

It speaks the public wire formats only (OpenAI Chat Completions and Responses, and the
Responses WebSocket mode), so it works against any OpenAI-compatible server. It imports
nothing from ``backends``, ``gateway`` or ``commands``.

Modules, by job:

- the client library: ``client`` (``Client``, ``Stream``: one turn over HTTP or a websocket),
  ``event_parsers`` (wire JSON -> events), ``events`` (typed events, a turn's ``Summary``);
- the load generator of ``fastmode bench``: ``load_config`` (validated load parameters),
  ``loadgen`` (open and closed loops, one process), ``http_transport`` / ``ws_transport`` (one
  request over each), ``sse_scanner`` (hot-path SSE token scanner), ``progress`` (live bar),
  ``worker_processes`` (``--workers N``), ``records`` (what a run records);
- what a bench makes of it: ``stats`` (percentiles, ITL, TPOT, goodput, cost, tool validity),
  ``report`` (tables and the JSON document), ``plots`` (PNGs), ``scenarios`` (fast-share
  sweep), ``bench_run`` (one bench from a typed plan), ``trace_reader`` (JSONL traces),
  ``simcompare`` (the simulator beside the measurement), ``schema_check``, ``workload``.

The ``fastmode chat`` and ``fastmode bench`` command lines are in ``fastmode/cli/``.
"""

from fastmode.clients.client import TIERS, Client, Stream, tier_url
from fastmode.clients.event_parsers import ChatParser, ResponsesParser
from fastmode.clients.events import (
    Done,
    Error,
    Event,
    Summary,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)

__all__ = [
    "TIERS",
    "ChatParser",
    "Client",
    "Done",
    "Error",
    "Event",
    "ResponsesParser",
    "Stream",
    "Summary",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "tier_url",
]
