"""The one error type of workload descriptions, shared by the simulator and the bench."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload parameter is invalid; the message names it (flag or field) and what is allowed.

    A ``ValueError`` so that callers who only care that input was bad need not import it; the
    commands turn it into their one-line usage error.
    """
