"""What a recorded exchange says, read from the client-facing bytes as a client would read them.

The events (or body) a cassette holds are the one source of truth: the reply's content (text
pieces, tool calls with their ids, the finish reason), the response's id and creation time, and
the usage are read back from them here, per protocol, so a hand-edited cassette replays what it
says. The same reading checks that each stream is well-formed for its protocol (``fastmode
replay-check``): every problem found is listed, none is fatal to the reading.

Ids go back to the gateway's own: every encoder derives its ids from the job's id
(``req-X`` is ``chatcmpl-X``, ``resp_X``, ``msg_X``), and a tool call's from its internal id
(Anthropic's ``toolu_X`` is ``call_X``), so a job made from a transcript renders the recorded ids
again — a client continuing a replayed conversation sends back exactly what it sent when it
was recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from fastmode.backends.mockmodel import Piece

ID_PREFIXES = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_",
               "messages": "msg_"}
ANTHROPIC_STOPS = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                   "stop_sequence": "stop", "pause_turn": "stop", "refusal": "stop"}


@dataclass
class Transcript:
    """The content and envelope of one recorded exchange."""

    rid: str | None = None  # the response id on the wire
    created: int | None = None
    pieces: list[Piece] = field(default_factory=list)
    units: list[int] = field(default_factory=list)  # content pieces carried by each event
    tools: list[tuple[str, str]] = field(default_factory=list)  # (internal id, name)
    finish_reason: str = "stop"
    stop_sequence: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int = 0
    output_tokens: int | None = None
    failed: bool = False  # the exchange ended with the protocol's error event
    problems: list[str] = field(default_factory=list)

    def job_id(self, protocol: str) -> str | None:
        """The gateway job id whose encoders render ``rid`` again."""
        rid, prefix = self.rid, ID_PREFIXES[protocol]
        if not rid:
            return None
        return "req-" + (rid[len(prefix):] if rid.startswith(prefix) else rid)

    def text(self, piece: str) -> int:
        self.pieces.append(Piece(piece))
        return 1

    def tool(self, fragment: str, k: int) -> int:
        self.pieces.append(Piece(fragment, k))
        return 1

    def usage(self, prompt: Any, cached: Any, output: Any) -> None:
        if isinstance(prompt, int):
            self.prompt_tokens = prompt
        if isinstance(cached, int):
            self.cached_tokens = cached
        if isinstance(output, int):
            self.output_tokens = output


def internal_tool_id(wire_id: str) -> str:
    """A tool call's internal id from its wire id (Anthropic renders ``call_X`` as
    ``toolu_X``; OpenAI's protocols show the internal id itself)."""
    return "call_" + wire_id[6:] if wire_id.startswith("toolu_") else wire_id


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a reader never trips on a shape)."""
    return value if isinstance(value, dict) else {}


def _chat_body(tr: Transcript, body: dict[str, Any]) -> None:
    if body.get("object") != "chat.completion":
        tr.problems.append(f"body: object is {body.get('object')!r}, not 'chat.completion'")
    tr.rid, tr.created = body.get("id"), body.get("created")
    choices = body.get("choices") or [{}]
    choice = obj(choices[0])
    msg = obj(choice.get("message"))
    if isinstance(msg.get("content"), str) and msg["content"]:
        tr.text(msg["content"])
    for k, call in enumerate(msg.get("tool_calls") or ()):
        fn = obj(obj(call).get("function"))
        tr.tools.append((str(obj(call).get("id") or f"call_{k}"), str(fn.get("name") or "")))
        tr.tool(str(fn.get("arguments") or ""), k)
    tr.finish_reason = str(choice.get("finish_reason") or "stop")
    _openai_usage(tr, body.get("usage"), "body")


def _completions_body(tr: Transcript, body: dict[str, Any]) -> None:
    if body.get("object") != "text_completion":
        tr.problems.append(f"body: object is {body.get('object')!r}, not 'text_completion'")
    tr.rid, tr.created = body.get("id"), body.get("created")
    choice = obj((body.get("choices") or [{}])[0])
    if isinstance(choice.get("text"), str) and choice["text"]:
        tr.text(choice["text"])
    tr.finish_reason = str(choice.get("finish_reason") or "stop")
    _openai_usage(tr, body.get("usage"), "body")


def _openai_usage(tr: Transcript, usage: Any, where: str) -> None:
    if not isinstance(usage, dict):
        tr.problems.append(f"{where}: no usage")
        return
    details = obj(usage.get("prompt_tokens_details"))
    tr.usage(usage.get("prompt_tokens"), details.get("cached_tokens"),
             usage.get("completion_tokens"))


def responses_object(tr: Transcript, resp: dict[str, Any], where: str,
                     content: bool = True) -> None:
    """A Responses ``response`` object (a body, or a terminal event's): envelope and usage;
    ``content``: its output items too (a body's, not a stream's, whose deltas were read)."""
    if resp.get("object") != "response":
        tr.problems.append(f"{where}: object is {resp.get('object')!r}, not 'response'")
    tr.rid, tr.created = resp.get("id"), resp.get("created_at")
    calls = 0
    for item in resp.get("output") or ():
        item = obj(item)
        if item.get("type") == "function_call":
            if content:
                tr.tools.append((str(item.get("call_id") or ""), str(item.get("name") or "")))
                tr.tool(str(item.get("arguments") or ""), calls)
            calls += 1
        elif item.get("type") == "message" and content:
            for part in item.get("content") or ():
                part = obj(part)
                if part.get("type") == "output_text" and part.get("text"):
                    tr.text(str(part["text"]))
    status = resp.get("status")
    tr.finish_reason = "tool_calls" if calls else ("length" if status == "incomplete" else "stop")
    usage = resp.get("usage")
    if isinstance(usage, dict):
        details = obj(usage.get("input_tokens_details"))
        tr.usage(usage.get("input_tokens"), details.get("cached_tokens"),
                 usage.get("output_tokens"))
    elif status == "completed":
        tr.problems.append(f"{where}: a completed response without usage")


def _responses_body(tr: Transcript, body: dict[str, Any]) -> None:
    responses_object(tr, body, "body")


def messages_usage(tr: Transcript, usage: Any) -> None:
    """Anthropic usage: input tokens exclude what was read from and written to the cache."""
    u = obj(usage)
    parts = [u.get("input_tokens"), u.get("cache_read_input_tokens"),
             u.get("cache_creation_input_tokens")]
    if isinstance(parts[0], int):
        tr.usage(sum(p for p in parts if isinstance(p, int)), u.get("cache_read_input_tokens"),
                 None)
    if isinstance(u.get("output_tokens"), int):
        tr.output_tokens = u["output_tokens"]


def messages_stop(tr: Transcript, reason: Any, sequence: Any) -> None:
    tr.finish_reason = ANTHROPIC_STOPS.get(str(reason), "stop")
    tr.stop_sequence = sequence if isinstance(sequence, str) else None


def _messages_body(tr: Transcript, body: dict[str, Any]) -> None:
    if body.get("type") != "message":
        tr.problems.append(f"body: type is {body.get('type')!r}, not 'message'")
    tr.rid = body.get("id")
    for block in body.get("content") or ():
        block = obj(block)
        if block.get("type") == "text" and block.get("text"):
            tr.text(str(block["text"]))
        elif block.get("type") == "tool_use":
            k = len(tr.tools)
            tr.tools.append((internal_tool_id(str(block.get("id") or "")),
                             str(block.get("name") or "")))
            tr.tool(orjson.dumps(block.get("input") or {}).decode(), k)
    messages_stop(tr, body.get("stop_reason"), body.get("stop_sequence"))
    messages_usage(tr, body.get("usage"))


BODIES = {"chat": _chat_body, "completions": _completions_body,
          "responses": _responses_body, "messages": _messages_body}
