"""``fastmode chat``: stream one answer to the terminal, then a one-line summary.

The command line and the printing only; the turn itself is ``clients.client.Client`` (public
HTTP API or the Responses websocket), so it works against any OpenAI-compatible server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from fastmode.clients.client import TIERS, Client, tier_url
from fastmode.clients.events import Error, TextDelta, ToolCallDelta

DEFAULT_URL = "http://127.0.0.1:8000"


class UsageError(ValueError):
    """A bad flag: ``fastmode chat: error: ...`` and exit status 2 (see ``commands``)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "chat",
        help="stream one answer to the terminal, then TTFT, tokens/s, tokens, cost and tier",
        description="Stream one answer from a fastmode (or any OpenAI-compatible) server and end "
        "with a one-line summary: TTFT, tokens/s, tokens, cost, tier.",
    )
    p.add_argument("prompt", nargs="+", help="the prompt (words are joined with spaces)")
    p.add_argument("--url", default=DEFAULT_URL,
                   help=f"server root, without /v1 (default {DEFAULT_URL})")
    p.add_argument("--tier", choices=list(TIERS), default="standard",
                   help="standard: frontier on /v1; fast: frontier on /fast/v1; "
                   "spark: frontier-spark (default standard)")
    p.add_argument("--ws", action="store_true",
                   help="use the Responses API WebSocket mode instead of HTTP streaming")
    p.add_argument("--model", help="model id (default: the tier's)")
    p.add_argument("--max-tokens", type=int, help="output cap")
    p.add_argument("--api-key", default=os.environ.get("FASTMODE_API_KEY")
                   or os.environ.get("OPENAI_API_KEY"),
                   help="bearer key (default $FASTMODE_API_KEY or $OPENAI_API_KEY)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError("--max-tokens: must be at least 1")
    return asyncio.run(_chat(args))


async def _chat(args: argparse.Namespace) -> int:
    base, model = tier_url(args.url, args.tier)
    model = args.model or model
    out = sys.stdout
    async with Client(base, api_key=args.api_key, transport="ws" if args.ws else "http") as c:
        stream = c.stream(" ".join(args.prompt), model=model, max_tokens=args.max_tokens)
        calls: set[int] = set()
        wrote = False
        async for event in stream:
            if isinstance(event, TextDelta):
                out.write(event.text)
            elif isinstance(event, ToolCallDelta):
                if event.index not in calls:
                    calls.add(event.index)
                    out.write(f"{chr(10) if wrote else ''}[tool call {event.name}] ")
                out.write(event.arguments)
            elif isinstance(event, Error):
                if wrote:
                    out.write("\n")
                code = f" {event.code}" if event.code else ""
                status = f" {event.status}" if event.status else ""
                hint = (f" (is a server running there? start one with `fastmode serve`, or pass "
                        f"--url; tried {args.url})") if event.code == "connection_error" else ""
                print(f"fastmode chat: error{status}{code}: {event.message}{hint}",
                      file=sys.stderr)
                return 1
            else:
                continue
            wrote = True
            out.flush()
        out.write("\n")
        out.flush()
        summary = stream.summary
        if summary.tier not in TIERS:  # websocket: only OpenAI's service_tier is known
            summary.tier = f"{args.tier} (service_tier {summary.tier})"
        print(summary.line(), file=sys.stderr)
    return 0
