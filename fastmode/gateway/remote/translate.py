"""Every protocol to the upstream's Chat Completions, and the upstream's answer back to a reply.

A remote tier serves Chat Completions, the Responses API (SSE and websocket) and Anthropic
Messages by translation, as LiteLLM does in front of vLLM: every protocol already translates its
wire request into a ``TurnRequest`` (chat-shaped messages, tools, tool choice, stop, seed, the
output cap), which becomes one upstream ``/v1/chat/completions`` request; the upstream's answer
becomes a ``LiveReply``, which the protocol's own encoder renders exactly as it renders an
in-process reply. So the engines need to speak only Chat Completions (a fastmode engine, vLLM,
llm-d's simulator), and what is the gateway's stays at the gateway: authentication, limits,
``previous_response_id`` (the conversation is expanded before it goes upstream), usage, price.

Per upstream event the reader does one ``orjson.loads`` (a few hundred bytes) and appends one
piece; the client's event is then encoded by the protocol's pre-encoded fast path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from fastmode.backends.images import openai_part_image
from fastmode.backends.mockmodel import REASONING, Piece, Reasoning, ToolCall, ToolSpec
from fastmode.backends.mockmodel.request import CUSTOM, FUNCTION
from fastmode.backends.tokenizer import tokenize
from fastmode.gateway.errors import APIError
from fastmode.gateway.protocols.openai_responses.items import COMPACTED_CALLS
from fastmode.gateway.values.request import TurnRequest

DONE = b"[DONE]"
# Responses content parts and Anthropic blocks that carry text, in Chat's part vocabulary
_TEXT_PARTS = {"input_text", "output_text", "text"}
GATEWAY_ONLY = {COMPACTED_CALLS}  # message keys the gateway keeps for itself


def _chat_content(content: Any) -> Any:
    """Content parts of any front end as Chat Completions parts (text parts as ``text``)."""
    if not isinstance(content, list):
        return content
    out = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            out.append({"type": "text", "text": str(part.get("text") or "")})
        elif isinstance(part, dict) and part.get("type") == "refusal":
            out.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif isinstance(part, dict) and part.get("type") in ("input_image", "image"):
            out.append(_image_url(part))
        else:
            out.append(part)
    return out


def _image_url(part: dict[str, Any]) -> dict[str, Any]:
    """A Responses ``input_image`` or an Anthropic ``image`` block as Chat's ``image_url`` (the
    upstream bills it by the same rule: ``backends.images``)."""
    url, detail = openai_part_image(part)
    source = part.get("source")
    if part.get("type") == "image" and isinstance(source, dict):
        url = (source.get("url") or "") if source.get("type") == "url" else (
            f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}")
    # a file id names nothing the upstream has: an address that never resolves (.invalid)
    ref: dict[str, Any] = {"url": url or f"https://files.invalid/{part.get('file_id', '')}"}
    if detail is not None:
        ref["detail"] = detail
    return {"type": "image_url", "image_url": ref}


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        msg = {k: v for k, v in m.items()
               if (v is not None or k == "content") and k not in GATEWAY_ONLY}
        if "content" in msg:
            msg["content"] = _chat_content(msg["content"])
        if msg.get("tool_calls"):  # Chat has no namespaces: the gateway keeps them
            msg["tool_calls"] = [{k: v for k, v in c.items() if k != "namespace"}
                                 for c in msg["tool_calls"]]
        out.append(msg)
    return out


def chat_tool(tool: ToolSpec) -> dict[str, Any]:
    """A tool in Chat's shape: a function, or a custom tool (its grammar, whose syntax the
    spec does not keep, is not sent: the upstream's input is freeform text)."""
    if tool.kind == CUSTOM:
        return {"type": "custom", "custom": {"name": tool.name, "description": tool.description,
                                             "format": {"type": "text"}}}
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": dict(tool.parameters)}}


def namespaces(tools: Sequence[ToolSpec]) -> dict[str, str]:
    """Tool name -> the Responses namespace it was declared in (restored on the way back)."""
    return {t.name: t.namespace for t in tools if t.namespace}


def upstream_payload(turn: TurnRequest, cap: int, model: str, stream: bool) -> bytes:
    """The upstream Chat Completions body of a turn of any protocol.

    ``cap`` is the gateway's output cap (the request's, or the server default within the context
    window), so the upstream never decides a length the gateway did not allow for."""
    gen = turn.generation
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(gen.messages),
        "max_tokens": cap,
        "stream": stream,
        "temperature": gen.temperature,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if gen.seed is not None:
        body["seed"] = gen.seed
    if gen.stop:
        body["stop"] = list(gen.stop)
    if gen.ignore_eos:
        body["ignore_eos"] = True  # vLLM's extension, which fastmode engines honour too
    if gen.tools:
        body["tools"] = [chat_tool(t) for t in gen.tools]
        choice = gen.tool_choice
        forced = next((t for t in gen.tools if t.name == choice), None)
        kind = "custom" if forced is not None and forced.kind == CUSTOM else "function"
        body["tool_choice"] = (choice if choice in ("none", "auto", "required") else
                               {"type": kind, kind: {"name": choice}})
        if not gen.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    fmt = gen.response_format  # structured outputs: the upstream writes the JSON
    if fmt is not None and fmt.kind == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": fmt.name or "output", "schema": dict(fmt.schema or {}),
            "strict": fmt.strict}}
    elif fmt is not None:
        body["response_format"] = {"type": "json_object"}
    if gen.effort is not None and gen.effort != "none":
        body["reasoning_effort"] = gen.effort  # it thinks upstream, at the upstream's speed
    return orjson.dumps(body)


class LiveReply:
    """The upstream's reply as it arrives, in the shape of the mock model's ``Generation``.

    The protocol encoders read a job's reply through ``pieces``, ``text``, ``tool_calls``,
    ``finish_reason``, ``stop_sequence`` and ``output_tokens``; an in-process reply is whole at
    admission, this one grows as the upstream streams (each piece is appended before the
    encoder is asked for it). A tool call's ``arguments`` are complete once the reply is.

    An upstream that shows its reasoning (vLLM's ``reasoning`` / ``reasoning_content``) sends
    it first: its deltas become the reply's reasoning pieces, one per delta, which the encoders
    show or hide as the tier's model is configured (``raw_reasoning``). Reasoning after the
    content has begun is not shown (an encoder's reasoning comes first); it stays billed."""

    __slots__ = ("pieces", "tool_calls", "finish_reason", "stop_sequence", "reported_output",
                 "reasoning_tokens", "_text", "_thought", "_args", "_index", "_spaces")
    live = True  # grows as the upstream streams (the encoders lay out reasoning as it comes)

    def __init__(self, spaces: dict[str, str] | None = None) -> None:
        self._spaces = spaces or {}  # tool name -> its namespace (``namespaces``)
        self.pieces: list[Piece] = []
        self.reasoning_tokens = 0  # the reasoning pieces, first in ``pieces``
        self._thought: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.finish_reason = "stop"
        self.stop_sequence: str | None = None
        self.reported_output: int | None = None  # the upstream's completion_tokens
        self._text: list[str] = []
        self._args: list[list[str]] = []
        self._index: dict[int, int] = {}  # upstream tool-call index -> ours

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def output_tokens(self) -> int:
        """What is billed: the upstream's count when it gave one, else the pieces received."""
        return self.reported_output if self.reported_output is not None else len(self.pieces)

    @property
    def reasoning(self) -> Reasoning | None:
        if not self.reasoning_tokens:
            return None
        return Reasoning(self.reasoning_tokens, "".join(self._thought), "upstream")

    def add_reasoning(self, text: str) -> bool:
        """Reasoning text from the upstream; True if it added a piece (only before content)."""
        if len(self.pieces) > self.reasoning_tokens:
            return False
        self._thought.append(text)
        self.pieces.append(Piece(text, REASONING))
        self.reasoning_tokens += 1
        return True

    def add_text(self, text: str) -> None:
        self._text.append(text)
        self.pieces.append(Piece(text))

    def add_tool_delta(self, delta: dict[str, Any], position: int) -> bool:
        """One ``tool_calls`` delta entry; True if it added a piece."""
        idx = delta.get("index", position)
        custom = delta.get("custom")
        fn = (custom if isinstance(custom, dict) else delta.get("function")) or {}
        k = self._index.get(idx)
        if k is None:
            k = self._index[idx] = len(self.tool_calls)
            cid = delta.get("id") or f"call_{k}"
            name = str(fn.get("name") or "")
            kind = CUSTOM if isinstance(custom, dict) or delta.get("type") == CUSTOM else FUNCTION
            self.tool_calls.append(ToolCall(str(cid), name, "", kind=kind,
                                            namespace=self._spaces.get(name, "")))
            self._args.append([])
        fragment = fn.get("input" if self.tool_calls[k].kind == CUSTOM else "arguments")
        if not fragment:
            return False
        self._args[k].append(fragment)
        self.pieces.append(Piece(fragment, k))
        return True

    def finish(self, reason: str | None, usage: dict[str, Any] | None) -> None:
        """The reply is whole: tool calls get their full arguments, the count its final value."""
        self.tool_calls = [replace(c, arguments="".join(self._args[k]))
                           for k, c in enumerate(self.tool_calls)]
        if reason:
            self.finish_reason = reason
        if self.tool_calls and self.finish_reason == "stop":
            self.finish_reason = "tool_calls"  # some servers say "stop" after a tool call
        if usage is not None:
            self.reported_output = int(usage.get("completion_tokens") or 0) or None


def usage_counts(usage: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) of a Chat Completions usage object."""
    details = usage.get("prompt_tokens_details") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return prompt, min(cached, prompt)


class UpstreamFailed(APIError):
    """The upstream broke off, sent an error event, or answered something that is not a chat
    completion; in a stream that has started, the protocol's error event says so."""

    def __init__(self, message: str, code: str, status: int = 502) -> None:
        super().__init__(status, message, code=code, type="server_error")


def _choice(obj: dict[str, Any]) -> dict[str, Any] | None:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


class ChunkReader:
    """Reads an upstream's ``chat.completion.chunk`` SSE bytes into a ``LiveReply``.

    ``feed`` takes whatever bytes arrived (events may be split anywhere) and returns how many
    pieces they added. Reads ``usage`` (the include_usage chunk), ``time_info`` (fastmode
    engines), vLLM's ``stop_reason`` (the stop string that ended the text) and ``[DONE]``."""

    __slots__ = ("reply", "buf", "done", "usage", "time_info", "reason")

    def __init__(self, reply: LiveReply) -> None:
        self.reply = reply
        self.buf = b""
        self.done = False
        self.usage: dict[str, Any] | None = None
        self.time_info: dict[str, Any] | None = None
        self.reason: str | None = None

    def feed(self, data: bytes) -> int:
        if self.buf:
            data = self.buf + data
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self.buf = data
            return 0
        self.buf = data[cut + 2:]
        added = 0
        for event in data[:cut].split(b"\n\n"):
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    added += self._data(line[5:].strip())
        return added

    def _data(self, raw: bytes) -> int:
        if raw == DONE:
            self.done = True
            self.reply.finish(self.reason, self.usage)
            return 0
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamFailed("The upstream sent an event that is not JSON.",
                                 "bad_upstream_response") from None
        if not isinstance(obj, dict):
            return 0
        if "error" in obj:
            err = obj["error"] if isinstance(obj["error"], dict) else {"message": obj["error"]}
            raise UpstreamFailed(f"Upstream error: {err.get('message') or 'unknown'}",
                                 str(err.get("code") or "upstream_error"))
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        if isinstance(obj.get("time_info"), dict):
            self.time_info = obj["time_info"]
        choice = _choice(obj)
        if choice is None:
            return 0
        added = 0
        delta = choice.get("delta") or {}
        thought = delta.get("reasoning") or delta.get("reasoning_content")
        if isinstance(thought, str) and thought and self.reply.add_reasoning(thought):
            added += 1
        content = delta.get("content")
        if content:
            self.reply.add_text(content)
            added += 1
        for i, call in enumerate(delta.get("tool_calls") or ()):
            if isinstance(call, dict) and self.reply.add_tool_delta(call, i):
                added += 1
        if choice.get("finish_reason"):
            self.reason = choice["finish_reason"]
            if isinstance(choice.get("stop_reason"), str):
                self.reply.stop_sequence = choice["stop_reason"]
        return added


def reply_from_completion(raw: bytes, spaces: dict[str, str] | None = None,
                          ) -> tuple[LiveReply, dict[str, Any], dict[str, Any] | None]:
    """A whole (non-streamed) chat completion: (reply, usage, time_info); ``spaces``: the
    tools' namespaces (``namespaces``)."""
    try:
        obj = orjson.loads(raw)
        choice = _choice(obj)
        usage = obj["usage"]
        assert choice is not None and isinstance(usage, dict)
    except (orjson.JSONDecodeError, KeyError, TypeError, AssertionError):
        raise UpstreamFailed("Upstream error: the upstream's answer is not a chat completion "
                             "with usage.", "bad_upstream_response") from None
    reply = LiveReply(spaces)
    msg = choice.get("message") or {}
    thought = msg.get("reasoning") or msg.get("reasoning_content")
    if isinstance(thought, str):
        for token in tokenize(thought):  # one piece per token, as a stream would bring them
            reply.add_reasoning(token)
    if msg.get("content"):
        reply.add_text(str(msg["content"]))
    for i, call in enumerate(msg.get("tool_calls") or ()):
        if isinstance(call, dict):
            reply.add_tool_delta({**call, "index": i}, i)
    if isinstance(choice.get("stop_reason"), str):
        reply.stop_sequence = choice["stop_reason"]
    reply.finish(choice.get("finish_reason"), usage)
    ti = obj.get("time_info")
    return reply, usage, ti if isinstance(ti, dict) else None
