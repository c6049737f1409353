"""Fallbacks of a fit for what its figures do not measure: a GPU no figure measured takes its
nearest measured sibling's chip values (``HW_SIBLINGS``), an engine's unmeasured terms come
from its nearest ancestor that measured them (``ENGINE_RELATIVES``, ``inherit_engines``). Used
inside every cross-validation fold, from that fold's figures only (no leakage)."""

from __future__ import annotations

from collections.abc import Sequence

from .engines import REFERENCE_ENGINE, EngineProfile, Engines
from .figures import Figure
from .params import ENGINE_SPECS, HW_SIBLINGS

SCALES = ("bandwidth_scale", "compute_scale")


def measured_sibling(name: str, figures: Sequence[Figure]) -> str | None:
    """The first of ``name``'s siblings (``HW_SIBLINGS``) that ``figures`` measure."""
    measured = {f.hardware for f in figures}
    return next((s for s in HW_SIBLINGS.get(name, ()) if s in measured), None)


def informed_terms(
    figures: Sequence[Figure], engines: Engines,
) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """The engine terms each engine's figures inform (its own fit keeps them), and those it
    may pass on to the engines that derive from it (``inherit_engines``):

    - the time to the first token besides the steps: informed by any TTFT or end-to-end
      latency; passed on only from a serving benchmark's (an API server, a tokenizer and a
      client: a static batch's harness has none of them);
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
        base = set(ENGINE_SPECS) - {"request_overhead_ms", *SCALES}
        own, out = base | set(SCALES), set(base)
        if any(f.metric in ("ttft", "e2e") for f in mine):
            own.add("request_overhead_ms")
        if any(f.scenario == "serving" and f.metric in ("ttft", "e2e") for f in mine):
            out.add("request_overhead_ms")
        if name == REFERENCE_ENGINE or len({f.hardware for f in mine}) > 1:
            out.update(SCALES)
        informs[name], passes[name] = frozenset(own), frozenset(out)
    return informs, passes


def before(engines: Engines, name: str) -> list[EngineProfile]:
    """The profiles listed before ``name`` (a figure belongs to the first that covers it)."""
    out: list[EngineProfile] = []
    for n, e in engines.items():
        if n == name:
            break
        out.append(e)
    return out


__all__ = ["SCALES", "before", "informed_terms", "measured_sibling"]
