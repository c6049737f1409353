"""Recorded event streams read per protocol: content, envelope, and whether the stream is
well-formed (what an SDK needs to parse it).

- Chat / Completions: ``data:``-only chunks of one id and object, a ``finish_reason``, then
  ``[DONE]`` last (or ``{"error": …}``, OpenAI's in-stream error, last).
- Responses: each event's SSE name is its ``type``, ``sequence_number`` counts 0, 1, 2, …,
  ``response.created`` first, one terminal event (``response.completed`` / ``incomplete`` /
  ``failed``, or ``error``) last.
- Messages: ``message_start`` first, ``message_stop`` (or ``error``) last, every delta inside a
  block that was started and not yet stopped, every block stopped before ``message_delta``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fastmode.backends.mockmodel import Piece
from fastmode.gateway.cassettes import exact
from fastmode.gateway.cassettes.transcript import (
    BODIES,
    Transcript,
    internal_tool_id,
    messages_stop,
    messages_usage,
    obj,
    responses_object,
)
from fastmode.gateway.observe.exchange_format import Entry, Event

DONE = "[DONE]"


def _openai_chunks(tr: Transcript, events: Sequence[Event], obj: str,
                   content: Callable[[Transcript, dict[str, Any]], int]) -> None:
    done = finished = False
    for i, ev in enumerate(events):
        n = 0
        where = f"event {i}"
        if done:
            tr.problems.append(f"{where}: after [DONE]")
        if ev.event:
            tr.problems.append(f"{where}: {obj} events have no SSE event name")
        data = ev.data
        if ev.raw is not None:
            if ev.raw == DONE:
                done = True
            else:
                tr.problems.append(f"{where}: neither JSON nor [DONE]")
        elif not isinstance(data, dict):
            tr.problems.append(f"{where}: not a JSON object")
        elif "error" in data:
            tr.failed = True
            if i != len(events) - 1:
                tr.problems.append(f"{where}: an error event that is not the last")
        else:
            if data.get("object") != obj:
                tr.problems.append(f"{where}: object is {data.get('object')!r}, not {obj!r}")
            if tr.rid is None:
                tr.rid, tr.created = data.get("id"), data.get("created")
            elif data.get("id") != tr.rid:
                tr.problems.append(f"{where}: id {data.get('id')!r} differs from {tr.rid!r}")
            usage = data.get("usage")
            if isinstance(usage, dict):
                details = usage.get("prompt_tokens_details") or {}
                tr.usage(usage.get("prompt_tokens"), details.get("cached_tokens"),
                         usage.get("completion_tokens"))
            for choice in data.get("choices") or ():
                if not isinstance(choice, dict):
                    tr.problems.append(f"{where}: a choice that is not an object")
                    continue
                n += content(tr, choice)
                if choice.get("finish_reason"):
                    tr.finish_reason = str(choice["finish_reason"])
                    finished = True
        tr.units.append(n)
    if not tr.failed:
        if not done:
            tr.problems.append("the stream does not end with [DONE]")
        if not finished:
            tr.problems.append("no chunk carries a finish_reason")


def _chat_choice(tr: Transcript, choice: dict[str, Any]) -> int:
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return 0
    n = tr.text(delta["content"]) if isinstance(delta.get("content"), str) \
        and delta["content"] else 0
    for call in delta.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        index = call.get("index", 0)
        fn = obj(call.get("function"))
        if index == len(tr.tools):
            tr.tools.append((str(call.get("id") or f"call_{index}"), str(fn.get("name") or "")))
        elif not isinstance(index, int) or index > len(tr.tools):
            tr.problems.append(f"tool call index {index!r} out of order")
            continue
        if fn.get("arguments"):
            n += tr.tool(str(fn["arguments"]), index)
    return n


def _completions_choice(tr: Transcript, choice: dict[str, Any]) -> int:
    text = choice.get("text")
    return tr.text(text) if isinstance(text, str) else 0


def chat(tr: Transcript, events: Sequence[Event]) -> None:
    _openai_chunks(tr, events, "chat.completion.chunk", _chat_choice)


def completions(tr: Transcript, events: Sequence[Event]) -> None:
    _openai_chunks(tr, events, "text_completion", _completions_choice)


RESPONSES_TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def _named_events(tr: Transcript, events: Sequence[Event]
                  ) -> Iterator[tuple[int, str, dict[str, Any], Any]]:
    """(index, where, body, type) of each event of a named-event stream (Responses, Messages):
    one that is not a JSON object is a problem and counts no token; an SSE name that is not
    the body's type is a problem."""
    for i, ev in enumerate(events):
        where = f"event {i}"
        data = ev.data
        if not isinstance(data, dict):
            tr.problems.append(f"{where}: not a JSON object")
            tr.units.append(0)
            continue
        kind = data.get("type")
        if ev.event != kind:
            tr.problems.append(f"{where}: SSE name {ev.event!r} is not its type {kind!r}")
        yield i, where, data, kind


def responses(tr: Transcript, events: Sequence[Event]) -> None:
    calls: dict[int, int] = {}  # output_index -> tool call number
    ended = False
    expected = 0  # the next sequence number (after a gap: the one after the number seen)
    for i, where, data, kind in _named_events(tr, events):
        n = 0
        seq = data.get("sequence_number")
        if seq != expected and kind != "error":
            tr.problems.append(f"{where}: sequence_number {seq!r}, expected {expected}")
        expected = (seq if isinstance(seq, int) else expected) + 1
        if i == 0 and kind != "response.created":
            tr.problems.append(f"{where}: the stream starts with {kind!r}, not "
                               "'response.created'")
        if ended:
            tr.problems.append(f"{where}: after the terminal event")
        item = obj(data.get("item"))
        if kind == "response.output_item.added" and item.get("type") == "function_call":
            calls[int(data.get("output_index") or 0)] = len(tr.tools)
            tr.tools.append((str(item.get("call_id") or ""), str(item.get("name") or "")))
        elif kind == "response.output_text.delta":
            n = tr.text(str(data.get("delta") or ""))
        elif kind == "response.function_call_arguments.delta":
            k = calls.get(int(data.get("output_index") or 0))
            if k is None:
                tr.problems.append(f"{where}: arguments of a function call never added")
            else:
                n = tr.tool(str(data.get("delta") or ""), k)
        elif kind in RESPONSES_TERMINAL:
            ended = True
            tr.failed = kind in ("response.failed", "error")
            if isinstance(data.get("response"), dict):
                responses_object(tr, data["response"], where, content=False)
            if tr.tools:
                tr.finish_reason = "tool_calls"
        elif kind == "response.created" and isinstance(data.get("response"), dict):
            tr.rid, tr.created = data["response"].get("id"), data["response"].get("created_at")
        tr.units.append(n)
    if not ended:
        tr.problems.append("the stream has no terminal event (response.completed, "
                           "response.incomplete, response.failed or error)")


def messages(tr: Transcript, events: Sequence[Event]) -> None:
    open_blocks: dict[int, int] = {}  # index -> tool call number (-1: text or thinking)
    stopped = False
    for i, where, data, kind in _named_events(tr, events):
        n = 0
        if i == 0 and kind != "message_start":
            tr.problems.append(f"{where}: the stream starts with {kind!r}, not 'message_start'")
        if stopped:
            tr.problems.append(f"{where}: after message_stop")
        index = data.get("index")
        if kind == "message_start":
            msg = obj(data.get("message"))
            tr.rid = msg.get("id")
            messages_usage(tr, msg.get("usage"))
        elif kind == "content_block_start":
            block = obj(data.get("content_block"))
            if not isinstance(index, int) or index in open_blocks:
                tr.problems.append(f"{where}: block {index!r} started twice or unnamed")
            elif block.get("type") == "tool_use":
                open_blocks[index] = len(tr.tools)
                tr.tools.append((internal_tool_id(str(block.get("id") or "")),
                                 str(block.get("name") or "")))
            else:
                open_blocks[index] = -1
        elif kind == "content_block_delta":
            n = _messages_delta(tr, data, open_blocks, where)
        elif kind == "content_block_stop":
            if not isinstance(index, int) or open_blocks.pop(index, None) is None:
                tr.problems.append(f"{where}: block {index!r} stopped but not open")
        elif kind == "message_delta":
            if open_blocks:
                tr.problems.append(f"{where}: message_delta with blocks still open")
            delta = obj(data.get("delta"))
            messages_stop(tr, delta.get("stop_reason"), delta.get("stop_sequence"))
            usage = obj(data.get("usage"))
            if isinstance(usage.get("output_tokens"), int):
                tr.output_tokens = usage["output_tokens"]
        elif kind in ("message_stop", "error"):
            stopped = True
            tr.failed = kind == "error"
        tr.units.append(n)
    if not stopped:
        tr.problems.append("the stream does not end with message_stop (or error)")


def _messages_delta(tr: Transcript, data: dict[str, Any], open_blocks: dict[int, int],
                    where: str) -> int:
    index = data.get("index")
    delta = obj(data.get("delta"))
    if index not in open_blocks:
        said = f"a delta of block {index!r}, which is not open"
        if not any(p.endswith(said) for p in tr.problems):  # once per block, not per delta
            tr.problems.append(f"{where}: {said}")
        return 0
    kind = delta.get("type")
    if kind == "text_delta":
        return tr.text(str(delta.get("text") or ""))
    if kind == "input_json_delta":
        k = open_blocks[index]
        if k < 0:
            tr.problems.append(f"{where}: input_json_delta in a block that is not tool_use")
            return 0
        return tr.tool(str(delta.get("partial_json") or ""), k)
    return 0  # thinking and signature deltas: reasoning is not replayed as content


PARSERS: dict[str, Callable[[Transcript, Sequence[Event]], None]] = {
    "chat": chat, "completions": completions, "responses": responses, "messages": messages}


def read(entry: Entry) -> Transcript:
    """The transcript of an entry: its stream or its body read (its problems listed in it)."""
    tr = Transcript()
    if entry.events is not None:
        PARSERS[entry.protocol](tr, entry.events)
    elif entry.body is not None:
        BODIES[entry.protocol](tr, entry.body)
    prompt = entry.request.get("prompt")
    if entry.request.get("echo") and isinstance(prompt, str) and tr.pieces:
        first = tr.pieces[0]  # Completions' ``echo``: the prompt, sent before the reply
        if first.tool < 0 and first.text.startswith(prompt):
            tr.pieces[0] = Piece(first.text[len(prompt):], first.tool)
    tr.problems += exact.problems(entry, tr)
    return tr
