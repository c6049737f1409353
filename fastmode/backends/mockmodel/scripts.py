"""Scripted replies: a regex on the last user message gives a fixed text or tool call.

Configured in ``[[scripts]]``, so users can drive their agents down a known path; the first
matching rule wins, and it wins over tools and free text (but only right after a user turn).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Sequence

from fastmode.backends.mockmodel.pieces import finish_text, finish_tool_call
from fastmode.backends.mockmodel.request import Generation, GenerationRequest, ScriptRule, ToolCall
from fastmode.backends.mockmodel.streams import Streams
from fastmode.backends.mockmodel.toolcalls import call_id, dumps


def match_script(scripts: Sequence[ScriptRule], user_text: str,
                 offered: Collection[str] = ()) -> ScriptRule | None:
    """The first rule whose regex is found in the last user message; a rule that calls a tool
    only when the request offers that tool (``offered``: the tools' names), as a model can
    call only what it was given."""
    for rule in scripts:
        if rule.tool_name is not None and rule.tool_name not in offered:
            continue
        if _compiled(rule.match).search(user_text):
            return rule
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    """A rule's regex, compiled once (``re.search`` looks it up in ``re``'s own cache at
    every call, a few Python frames per request)."""
    return re.compile(pattern)


def scripted(rule: ScriptRule, req: GenerationRequest, streams: Streams) -> Generation:
    if rule.tool_name is not None:
        arguments = dumps(dict(rule.tool_arguments or {}))
        call = ToolCall(call_id(streams("call_id")), rule.tool_name, arguments)
        return finish_tool_call(call, req.max_tokens)
    return _finished(rule.reply or "", req.max_tokens, tuple(req.stop))


@functools.lru_cache(maxsize=256)
def _finished(reply: str, cap: int | None, stop: tuple[str, ...]) -> Generation:
    """A script's reply is the same text every time: tokenized once per cut (a Generation is
    immutable, so requests share it)."""
    return finish_text(reply, cap, stop)
