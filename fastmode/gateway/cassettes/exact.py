"""What a replayable exchange must say beyond being well-formed: checks a client's SDK or a
replay would trip on later, made when a cassette is read (``fastmode replay-check`` lists them,
``serve --replay`` refuses a directory that has any).

- the status: a recording is of an answered exchange (``status: 200``); anything else would be
  replayed as a 200 with the recorded events;
- every tool call's arguments (Chat's ``arguments`` deltas, Responses' ``arguments.delta``,
  Messages' ``partial_json``), joined, are a JSON object, as the client parses them (unless the
  reply was cut by its token cap: then they may end mid-JSON, as a provider's do);
- the usage agrees with the chunks: each content event carries at least one token, so a stream
  reports at least as many output tokens as it has content events, and no more than its
  content's tokens (fastmode's tokenizer, or one per event when that is more) plus its
  reasoning tokens.
"""

from __future__ import annotations

import orjson

from fastmode.backends.tokenizer import count_tokens
from fastmode.gateway.cassettes.transcript import Transcript
from fastmode.gateway.observe.exchange_format import Entry

SLACK_TOKENS = 1  # an end-of-sequence token some servers count in completion_tokens


def problems(entry: Entry, tr: Transcript) -> list[str]:
    out = []
    if entry.status != 200:
        out.append(f"status {entry.status}: a recording is of an answered exchange (200)")
    out += _tool_arguments(entry, tr)
    if entry.events is not None and not tr.failed and not tr.problems:
        out += _usage(entry, tr)  # (a malformed stream's count of events means nothing)
    return out


def _tool_arguments(entry: Entry, tr: Transcript) -> list[str]:
    args: list[list[str]] = [[] for _ in tr.tools]
    for p in tr.pieces:
        if 0 <= p.tool < len(args):
            args[p.tool].append(p.text)
    if _cut(entry, tr):
        return []  # cut by the token cap: a call's arguments may end mid-JSON, as the model's
    what = "input (partial_json)" if entry.protocol == "messages" else "arguments"
    out = []
    for k, parts in enumerate(args):
        text = "".join(parts)
        if not text.strip():
            continue  # no arguments sent: an empty object
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            out.append(f"tool call {k} ({tr.tools[k][1] or 'unnamed'}): its {what} are not "
                       f"JSON ({exc.msg} at {exc.pos}): {text[:60]!r}")
            continue
        if not isinstance(value, dict):
            out.append(f"tool call {k} ({tr.tools[k][1] or 'unnamed'}): its {what} are "
                       f"{type(value).__name__}, not a JSON object")
    return out


def _cut(entry: Entry, tr: Transcript) -> bool:
    """The reply ended at its token cap (Responses says so by its status, not a reason)."""
    if tr.finish_reason == "length":
        return True
    if entry.body is not None:
        return entry.body.get("status") == "incomplete"
    return any(isinstance(ev.data, dict) and ev.data.get("type") == "response.incomplete"
               for ev in entry.events or ())


def _reasoning(entry: Entry) -> tuple[int, bool]:
    """(reasoning tokens the usage reports, whether reasoning of unknown size was sent):
    Chat's ``completion_tokens_details``, Responses' ``output_tokens_details``; Anthropic's
    usage does not say, so a stream with a thinking block has no upper bound."""
    reported, unknown = 0, False
    for ev in entry.events or ():
        data = ev.data if isinstance(ev.data, dict) else {}
        for usage in (data.get("usage"), (data.get("response") or {}).get("usage")
                      if isinstance(data.get("response"), dict) else None):
            if isinstance(usage, dict):
                for key in ("completion_tokens_details", "output_tokens_details"):
                    details = usage.get(key)
                    if isinstance(details, dict) and isinstance(
                            details.get("reasoning_tokens"), int):
                        reported = details["reasoning_tokens"]
        block = data.get("content_block")
        if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking"):
            unknown = True
    return reported, unknown


def _usage(entry: Entry, tr: Transcript) -> list[str]:
    output = tr.output_tokens
    if output is None:
        return []
    events = sum(1 for p in tr.pieces if p.text)  # content events that carried something
    if output < events:
        return [f"usage: {output} output tokens for {events} content events (each carries "
                "at least one token)"]
    reasoning, unknown = _reasoning(entry)
    if unknown:
        return []
    content = sum(count_tokens(p.text) for p in tr.pieces)
    most = max(events, content) + reasoning + SLACK_TOKENS
    if output > most:
        return [f"usage: {output} output tokens, more than the chunks carry ({content} "
                f"tokens of content in {events} events, {reasoning} of reasoning)"]
    return []

