"""``[record]`` and ``[replay]``: the two config tables of record and replay (docs/replay.md).

``fastmode serve --record DIR`` / ``--replay DIR`` and the ``--replay-*`` flags set the same
fields, so one file can carry a team's settings (the redaction patterns above all) and the
flags choose the directory per run. Nothing here imports the rest of the gateway: the config
module includes these tables.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from fastmode.backends.config import Strict

# Request headers that never reach a cassette, whatever ``[record] headers`` lists: they carry
# credentials (the upstream's own key is the gateway's and never appears at the client-facing
# level at all).
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key",
                            "cookie", "set-cookie", "openai-organization", "openai-project"})
_SECRET_WORDS = re.compile(r"key|token|secret|auth|password|cookie", re.IGNORECASE)

# Shapes of provider API keys, replaced in every string of an exchange before it is written.
DEFAULT_REDACT = [
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}",  # OpenAI and Anthropic keys
    r"(?i:bearer)\s+[A-Za-z0-9._\-~+/]{8,}=*",  # a bearer token pasted into a prompt
]
REDACTED = "[REDACTED]"


def secret_header(name: str) -> bool:
    """A header whose value is (or may be) a credential: never recorded."""
    low = name.lower()
    return low in SECRET_HEADERS or bool(_SECRET_WORDS.search(low))


class RecordConfig(Strict):
    """``[record]``: where and how exchanges are recorded (``fastmode serve --record DIR``)."""

    dir: str = ""  # "" = not recording
    # request headers whose values are kept with each exchange (for the header matcher);
    # credentials are refused here and never written
    headers: list[str] = Field(default_factory=lambda: ["x-request-id"])
    # regular expressions replaced by "[REDACTED]" in every string of the request and the
    # response before they are written (and in each request before it is matched on replay)
    redact: list[str] = Field(default_factory=lambda: list(DEFAULT_REDACT))
    # "package.module:function": called with each entry (a dict) before it is written; returns
    # the entry to write (edited) or None to drop it. On replay it is called with the incoming
    # request as an entry that has no response, so requests are redacted alike.
    redact_hook: str = ""

    @field_validator("headers")
    @classmethod
    def _no_secrets(cls, names: list[str]) -> list[str]:
        for name in names:
            if secret_header(name):
                raise ValueError(f"{name!r} may carry a credential and is never recorded")
        return [n.lower() for n in names]

    @field_validator("redact")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(f"(?:{p})")  # joined with the others (a global flag is refused)
            except re.error as exc:
                raise ValueError(f"{p!r} is not a regular expression: {exc}") from None
        return patterns

    @field_validator("redact_hook")
    @classmethod
    def _hook(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", v):
            raise ValueError(f"{v!r}: expected 'package.module:function'")
        return v


Timing = str  # "recorded" | "none" | "modeled" | "tier:NAME" (checked below)
TIMINGS = ("recorded", "none", "modeled")


class ReplayConfig(Strict):
    """``[replay]``: how recorded exchanges are served (``fastmode serve --replay DIR``)."""

    dir: str = ""  # "" = not replaying
    # recorded: each event at its recorded time; none: at once; modeled: the content paced
    # and priced by the tier that serves the request; tier:NAME: by that tier
    timing: Timing = "recorded"
    # an unmatched request: a 404 in the route's format naming the nearest entry ("error"),
    # or the mock model's answer ("mock")
    miss: Literal["error", "mock"] = "error"
    # what identifies an exchange: the normalised body, the last user message, or a header
    match: Literal["body", "last_user", "header"] = "body"
    ignore: list[str] = Field(default_factory=list)  # body fields left out ("metadata.run")
    header: str = "x-request-id"  # the header of match = "header"

    @field_validator("timing")
    @classmethod
    def _timing(cls, v: str) -> str:
        if v in TIMINGS or (v.startswith("tier:") and len(v) > 5):
            return v
        raise ValueError(f"{v!r}: expected recorded, none, modeled or tier:NAME")

    @field_validator("header")
    @classmethod
    def _header(cls, v: str) -> str:
        return v.lower()

    @property
    def timing_tier(self) -> str | None:
        """The tier named by ``tier:NAME``."""
        return self.timing[5:] if self.timing.startswith("tier:") else None
