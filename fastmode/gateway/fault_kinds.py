"""The kinds of fault ``x-fastmode-fault``, config rules and the admin API may ask for.

Its own module (no imports) so that the config's ``FaultRule`` and the fault injector
(``gateway.faults``) read one list without importing each other.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """The one list of fault kinds: the header, config rules (``FaultRule.kind``), the admin
    API and the turn all read this. A ``StrEnum``: each kind equals its wire spelling."""

    S429 = "429"
    S500 = "500"
    S503 = "503"
    S529 = "529"
    FAST_EXHAUSTED = "fast-exhausted"
    TIMEOUT = "timeout"
    STALL = "stall"
    CUT = "cut"
    MALFORMED = "malformed"
    ERROR_EVENT = "error-event"


# answered with their status before any work, in the route's own format
STATUS_ANSWERS = frozenset({Kind.S429, Kind.S500, Kind.S503, Kind.S529})
# ... and fast-exhausted, which makes a premium pool look full: the overflow policy answers
STATUS_KINDS = STATUS_ANSWERS | {Kind.FAST_EXHAUSTED}
STREAM_KINDS = frozenset({Kind.STALL, Kind.CUT, Kind.MALFORMED, Kind.ERROR_EVENT})
KINDS = frozenset(Kind)
