"""Faults on demand: a header, config rules and an admin API make requests fail on purpose.

``spec`` defines the kinds and parses ``x-fastmode-fault``; ``injector`` decides (seeded) which
fault a request gets and renders status faults as errors; the turn pipeline (``gateway.pipeline.turn``)
applies them, once for every protocol and both transports. See docs/faults.md.
"""

from fastmode.gateway.fault_kinds import (
           KINDS,
           STATUS_ANSWERS,
           STATUS_KINDS,
           STREAM_KINDS,
           Kind,
)
from fastmode.gateway.faults.injector import NAMESPACE, FaultInjector
from fastmode.gateway.values.fault_spec import HEADER, TEST_ID_HEADER, Fault, parse_header

__all__ = ["HEADER", "KINDS", "NAMESPACE", "STATUS_ANSWERS", "STATUS_KINDS", "STREAM_KINDS",
           "TEST_ID_HEADER", "Fault", "FaultInjector", "Kind", "parse_header"]
