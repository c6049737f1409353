"""Fallbacks of a fit for what its figures do not measure: a GPU no figure measured takes its
nearest measured sibling's chip values (``HW_SIBLINGS``), an engine's unmeasured terms come
from its nearest ancestor that measured them (``ENGINE_RELATIVES``, ``inherit_engines``). Used
inside every cross-validation fold, from that fold's figures only (no leakage)."""

from __future__ import annotations

from collections.abc import Sequence

from fastmode.backends.calibrate.engines import REFERENCE_ENGINE, EngineProfile, Engines
from fastmode.backends.calibrate.figures import Figure
from fastmode.backends.calibrate.harness import through_server
from fastmode.backends.calibrate.params import ENGINE_SPECS, HW_SIBLINGS

SCALES = ("bandwidth_scale", "compute_scale")
SERVER = ("serving_overhead_ms", "serving_us_per_token")  # its API server's: fixed, per token
FIRST_TOKEN = ("request_overhead_ms", *SERVER)  # the runtime's, its server's


def measured_sibling(name: str, figures: Sequence[Figure]) -> str | None:
    """The first of ``name``'s siblings (``HW_SIBLINGS``) that ``figures`` measure."""
    measured = {f.hardware for f in figures}
    return next((s for s in HW_SIBLINGS.get(name, ()) if s in measured), None)


def informed_terms(
    figures: Sequence[Figure], engines: Engines,
) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """The engine terms each engine's figures inform (its own fit keeps them), and those it
    may pass on to the engines that derive from it (``inherit_engines``):

    - the runtime's time to the first token besides the steps (``request_overhead_ms``):
      measured by a TTFT taken in process (a static or offline harness, ``harness.py``), where
      nothing else is in it, and passed on from there; an engine timed otherwise keeps its
      prior (``held_at_prior``);
    - its API server's (``serving_overhead_ms``, and ``serving_us_per_token`` per prompt
      token): informed and passed on by the TTFTs and
      end-to-end latencies measured through a server;
    - the kernels' shares of the chip's peaks (``SCALES``): informed by any figure; passed on
      only from figures on two or more hardware (on one chip alone the stage-1 fit puts that
      chip's difference from the pooled GPU into them, which an engine on another chip must
      not inherit);
    - the host's work per step and per sequence: informed and passed on by any figure.
    """
    informs: dict[str, frozenset[str]] = {}
    passes: dict[str, frozenset[str]] = {}
    for name, e in engines.items():
        mine = [f for f in figures if e.covers(f.engine)
                and not any(o.covers(f.engine) for o in before(engines, name))]
        if not mine:
            continue
        base = set(ENGINE_SPECS) - {*FIRST_TOKEN, *SCALES}
        own, out = base | set(SCALES), set(base)
        timed = [f for f in mine if f.metric in ("ttft", "e2e")]
        if timed:
            own.add("request_overhead_ms")
        if any(runtime_timed(f) for f in timed):
            out.add("request_overhead_ms")
        if any(through_server(f) for f in timed):
            own.update(SERVER)
            out.update(SERVER)
        if name == REFERENCE_ENGINE or len({f.hardware for f in mine}) > 1:
            out.update(SCALES)
        informs[name], passes[name] = frozenset(own), frozenset(out)
    return informs, passes


def held_at_prior(figures: Sequence[Figure], engines: Engines) -> dict[str, frozenset[str]]:
    """The terms each engine's figures depend on but cannot tell apart, which the fit leaves
    at their priors: the runtime's time to the first token of an engine timed without a TTFT
    taken in process. A TTFT measured through its API server sees the runtime's and the
    server's together (the server's term takes the difference); a static batch's end-to-end
    latency (seconds of decoding) cannot tell a millisecond before its first token."""
    out: dict[str, frozenset[str]] = {}
    for name, e in engines.items():
        timed = [f for f in figures if f.metric in ("ttft", "e2e") and e.covers(f.engine)
                 and not any(o.covers(f.engine) for o in before(engines, name))]
        if timed and not any(runtime_timed(f) for f in timed):
            out[name] = frozenset({"request_overhead_ms"})
    return out


def runtime_timed(fig: Figure) -> bool:
    """True if ``fig`` measures the runtime's time to the first token: a TTFT taken in
    process (no API server in it)."""
    return fig.metric == "ttft" and not through_server(fig)


def before(engines: Engines, name: str) -> list[EngineProfile]:
    """The profiles listed before ``name`` (a figure belongs to the first that covers it)."""
    out: list[EngineProfile] = []
    for n, e in engines.items():
        if n == name:
            break
        out.append(e)
    return out


__all__ = ["FIRST_TOKEN", "SCALES", "SERVER", "before", "held_at_prior", "informed_terms",
           "measured_sibling", "runtime_timed"]
