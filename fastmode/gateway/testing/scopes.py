"""One test's scripted replies, counted faults and journal; the scopes of every test.

Replies are the ``[[scripts]]`` engine's, per test and at any turn: a rule's regex is searched
in the text of the conversation's last message, whatever its role (a user turn, or a tool
result, so an agent's final answer can be scripted too); the first rule that matches and has
uses left wins. A tool call's string arguments may use the match's groups (``\\1``,
``\\g<city>``: ``re.Match.expand``). A fault is used ``times`` times, counted in order, so
"429 once, then succeed" is the same on every run (no probability draw)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from fastmode.backends.mockmodel.pieces import finish_text, finish_tool_call
from fastmode.backends.mockmodel.request import Generation, ToolCall, message_text
from fastmode.backends.mockmodel.toolcalls import dumps
from fastmode.gateway.testing.claims import Claims
from fastmode.gateway.values.fault_spec import Fault

MAX_TESTS = 10_000  # scopes kept at once (a plugin clears each test's at its end)


@dataclass
class ReplyRule:
    match: str
    text: str | None = None
    tool_name: str | None = None
    tool_arguments: dict[str, Any] | None = None
    json: Any = None
    times: int | None = None  # None: any number of times
    used: int = 0

    def __post_init__(self) -> None:
        self.pattern = re.compile(self.match)

    @property
    def left(self) -> bool:
        return self.times is None or self.used < self.times

    def reply(self, found: re.Match[str], cap: int | None, stop: tuple[str, ...],
              n: int) -> Generation:
        self.used += 1
        if self.tool_name is not None:
            args = _expand(self.tool_arguments or {}, found)
            call = ToolCall(f"call_fastmode{n:012d}", self.tool_name, dumps(args))
            return finish_tool_call(call, cap)
        text = dumps(_expand(self.json, found)) if self.json is not None else self.text or ""
        return finish_text(found.expand(text) if self.json is None else text, cap, stop)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"match": self.match, "times": self.times, "used": self.used}
        if self.tool_name is not None:
            out["tool_call"] = {"name": self.tool_name, "arguments": self.tool_arguments or {}}
        elif self.json is not None:
            out["json"] = self.json
        else:
            out["text"] = self.text
        return out


def _expand(value: Any, found: re.Match[str]) -> Any:
    """Every string in ``value`` with the match's groups put in."""
    if isinstance(value, str):
        return found.expand(value)
    if isinstance(value, dict):
        return {k: _expand(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, found) for v in value]
    return value


@dataclass
class CountedFault:
    fault: Fault
    times: int
    used: int = 0


@dataclass
class TestScope:
    replies: list[ReplyRule] = field(default_factory=list)
    faults: list[CountedFault] = field(default_factory=list)
    # (job, request, scripted, admitted at: Unix time) of the test's admitted requests
    journal: list[Any] = field(default_factory=list)
    calls: int = 0
    test_id: str = ""
    claims: Claims | None = None  # uses counted across worker processes (``claims``)

    def note(self, job: Any, request: Any, scripted: bool) -> None:
        """One admitted request, for the journal."""
        self.journal.append((job, request, scripted, time.time()))

    def _claimed(self, name: str, times: int | None) -> bool:
        return times is None or self.claims is None or self.claims.take(self.test_id, name,
                                                                         times)

    def scripted(self, messages: Any, cap: int | None, stop: tuple[str, ...]
                 ) -> Generation | None:
        last = messages[-1] if messages else None
        text = message_text(last) if last is not None else ""
        for i, rule in enumerate(self.replies):
            if rule.left and (found := rule.pattern.search(text)) is not None:
                if not self._claimed(f"reply:{i}", rule.times):
                    rule.used = rule.times or rule.used  # another worker used the last
                    continue
                self.calls += 1
                return rule.reply(found, cap, stop, self.calls)
        return None

    def fault(self, tier: str, key: str, model: str) -> Fault | None:
        for i, counted in enumerate(self.faults):
            if counted.used < counted.times and counted.fault.matches(tier, key, model):
                if not self._claimed(f"fault:{i}", counted.times):
                    counted.used = counted.times
                    continue
                counted.used += 1
                return counted.fault
        return None


class TestScopes:
    """Every test's scope, by test id (created when the plugin first writes to one)."""

    def __init__(self) -> None:
        self.scopes: dict[str, TestScope] = {}
        self.claims: Claims | None = None  # set by a worker of ``--workers``

    def get(self, test_id: str) -> TestScope | None:
        return self.scopes.get(test_id) if test_id else None

    def open(self, test_id: str) -> TestScope:
        scope = self.scopes.get(test_id)
        if scope is None:
            if len(self.scopes) >= MAX_TESTS:
                self.scopes.pop(next(iter(self.scopes)))  # the oldest test's
            scope = self.scopes[test_id] = TestScope(test_id=test_id, claims=self.claims)
        return scope

    def clear(self, test_id: str) -> bool:
        if self.claims is not None:
            self.claims.clear(test_id)
        return self.scopes.pop(test_id, None) is not None
