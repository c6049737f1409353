"""Writing fitted values: a ``[hardware.NAME]`` fragment, or in place in hardware.toml."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastmode.backends.calibrate.engines import EngineProfile
from fastmode.backends.calibrate.figures import CalibrationError
from fastmode.backends.calibrate.fit import Fit, HardwareFit
from fastmode.backends.profiles import HardwareProfile

FORMATS = {
    "mbu": "{:.3f}", "mbu_kv": "{:.3f}", "mfu": "{:.3f}", "mfu_fp8": "{:.3f}",
    "gemm_min_tokens": "{:.1f}", "roofline_overlap": "{:.3f}", "step_overhead_ms": "{:.3f}", "layer_latency_us": "{:.2f}",
    "interconnect_latency_us": "{:.2f}", "allreduce_bus_share": "{:.3f}",
    "request_overhead_ms": "{:.2f}",
    "serving_overhead_ms": "{:.2f}",
    "mfu_fp4": "{:.3f}", "gemm_half_tokens": "{:.1f}", "attention_half_tokens": "{:.0f}",
    "expert_read_efficiency": "{:.3f}", "expert_compute_efficiency": "{:.3f}", "moe_layer_latency_us": "{:.2f}",
    "mla_layer_latency_us": "{:.2f}",
    "w4a16_efficiency": "{:.3f}", "expert_load_cv2": "{:.3f}", "serving_us_per_token": "{:.2f}",
    "request_us_per_prompt_token": "{:.2f}",
    "gqa_reread": "{:.3f}", "seq_overhead_us": "{:.2f}", "bandwidth_scale": "{:.3f}", "compute_scale": "{:.3f}",
}


def format_value(name: str, value: float) -> str:
    return FORMATS.get(name, "{:.4g}").format(value)


def profile_fragment(name: str, base: HardwareProfile, values: Mapping[str, float],
                     comment: str = "") -> str:
    """A ``[hardware.NAME]`` TOML table: ``base``'s fields with ``values`` replacing some."""
    lines = [f"[hardware.{name}]"]
    if comment:
        lines.extend(f"# {line}" for line in comment.splitlines())
    fields_ = [f for f in HardwareProfile.__dataclass_fields__ if f != "name"]
    for f in fields_:
        v: Any = values[f] if f in values else getattr(base, f)
        if v is None:
            continue
        if f in values:
            lines.append(f"{f} = {format_value(f, float(v))}  # fitted")
        elif isinstance(v, dict):
            inner = ", ".join(f"{k} = {float(x)!r}" for k, x in v.items())
            lines.append(f"{f} = {{ {inner} }}")
        elif isinstance(v, str):
            lines.append(f'{f} = "{v}"')
        else:
            lines.append(f"{f} = {v!r}")
    return "\n".join(lines) + "\n"


def update_toml_table(text: str, table: str, values: Mapping[str, str], note: str) -> str:
    """Set ``key = value`` lines in ``[table]`` of TOML text, keeping every comment.

    An existing key's line is replaced (its trailing comment dropped, ``note`` put there); a
    missing key is added at the end of the table.
    """
    lines = text.splitlines()
    header = f"[{table}]"
    hdr = f'["{table}"]'
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() in (header, hdr))
    except StopIteration:
        raise CalibrationError(f"table [{table}] not found") from None
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
        len(lines),
    )
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    pending = dict(values)
    for i in range(start + 1, end):
        key = lines[i].split("=", 1)[0].strip()
        if "=" in lines[i] and not lines[i].lstrip().startswith("#") and key in pending:
            lines[i] = f"{key} = {pending.pop(key)}  # {note}"
    extra = [f"{k} = {v}  # {note}" for k, v in pending.items()]
    lines[end:end] = extra
    return "\n".join(lines) + "\n"


def write_fits(path: Path, fits: Fit | Mapping[str, HardwareFit], note: str) -> None:
    """The fitted values of every hardware profile into hardware.toml (``path``)."""
    text = path.read_text("utf-8")
    table = fits.hardware if isinstance(fits, Fit) else fits
    for name in sorted(table):
        values = fits.hardware_values(name) if isinstance(fits, Fit) else table[name].values
        text = update_toml_table(
            text, name, {k: format_value(k, v) for k, v in values.items()}, note
        )
    path.write_text(text, "utf-8")


def write_engines(path: Path, engines: Mapping[str, EngineProfile], note: str) -> None:
    """The fitted terms of every engine into engines.toml (``path``), as ``[engines.NAME]``."""
    text = path.read_text("utf-8")
    for name, e in sorted(engines.items()):
        text = update_toml_table(
            text, f"engines.{name}", {k: format_value(k, v) for k, v in e.values().items()},
            note,
        )
    path.write_text(text, "utf-8")

__all__ = [
    "FORMATS",
    "format_value",
    "profile_fragment",
    "update_toml_table",
    "write_engines",
    "write_fits",
]
