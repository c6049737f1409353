"""Which tool wrote a results file or folder, recognised by its files, and reading it.

A folder is recognised by the files a tool writes into it, a file by its name and its schema;
what matches none is refused (``Unreadable``), never taken for some tool's:

* ``fastmode`` — ``fastmode bench --json``;
* ``aiperf`` — its artifact folder: ``profile_export_aiperf.json`` (summary) and
  ``profile_export.jsonl`` (records), or either file;
* ``guidellm`` — its report (``benchmarks.json``, or any name with its schema);
* ``vllm`` — ``vllm bench serve --save-result``;
* ``inference-perf`` — its report folder (``summary_lifecycle_metrics.json`` and, if kept,
  ``per_request_lifecycle_metrics.json``) or the summary file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastmode.clients.verify import aiperf, guidellm, inference_perf, simple
from fastmode.clients.verify.records import ToolRequest, ToolRun, Unreadable

__all__ = ["TOOLS", "ToolRequest", "ToolRun", "Unreadable", "detect", "read"]

TOOLS = ("fastmode", "aiperf", "guidellm", "vllm", "inference-perf")
_KNOWN = ("fastmode bench --json, aiperf's artifact folder or profile_export_aiperf.json, "
          "guidellm's benchmarks.json, vllm bench serve --save-result, inference-perf's "
          "report folder or summary_lifecycle_metrics.json")
# schema checks, in order: the first a document satisfies names its tool
_SCHEMAS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("fastmode", simple.is_fastmode), ("aiperf", aiperf.is_summary),
    ("guidellm", guidellm.is_report), ("inference-perf", inference_perf.is_summary),
    ("vllm", simple.is_vllm))


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise Unreadable(f"{path}: not JSON ({exc})") from None


def _folder(path: Path) -> tuple[str, Path]:
    """The tool whose files are in the folder, and the file to read."""
    summary = next(iter(sorted(path.glob(aiperf.SUMMARY_GLOB))), None)
    if summary is not None or (path / aiperf.RECORDS).exists():
        return "aiperf", path
    if (path / inference_perf.SUMMARY).exists():
        return "inference-perf", path / inference_perf.SUMMARY
    for name in guidellm.NAMES:
        if (path / name).exists():
            return "guidellm", path / name
    files = sorted(p.name for p in path.iterdir())
    shown = ", ".join(files[:8]) + (", …" if len(files) > 8 else "")
    raise Unreadable(f"{path}: a folder with none of the files verify reads "
                     f"({_KNOWN}); it has {shown or 'nothing'}")


def detect(path: Path) -> tuple[str, Path, Any]:
    """(tool, the file or folder to read, its parsed JSON or None for a folder or JSONL)."""
    if path.is_dir():
        kind, target = _folder(path)
        if target.is_dir():
            return kind, target, None
        path = target
    if path.suffix == ".jsonl":
        first = next((ln for ln in path.read_text().splitlines() if ln.strip()), "")
        if aiperf.is_record(first):
            return "aiperf", path, None
        raise Unreadable(f"{path}: JSON lines that are not aiperf's records ({_KNOWN})")
    doc = _load(path)
    for kind, check in _SCHEMAS:
        if check(doc):
            return kind, path, doc
    raise Unreadable(f"{path}: not a results file of a known tool ({_KNOWN})")


def read(source: str, tool: str | None = None, tier: str | None = None) -> ToolRun:
    """The results in ``source`` (a file, or a tool's output folder); ``tool`` names the
    format instead of detecting it, and must then agree with the file's schema."""
    path = Path(source)
    if not path.exists():
        raise Unreadable(f"{path}: no such file or folder")
    kind, target, doc = detect(path)
    if tool is not None and tool != kind:
        raise Unreadable(f"{path}: --tool {tool}, but the files are {kind}'s")
    if kind == "aiperf":
        run = aiperf.read(target)
    elif kind == "fastmode":
        run = simple.read_fastmode(target, doc, tier)
    elif kind == "vllm":
        run = simple.read_vllm(target, doc)
    elif kind == "guidellm":
        run = guidellm.read(target, doc)
    else:
        run = inference_perf.read(target, doc)
    if not run.metrics and not run.requests:
        raise Unreadable(f"{path}: {kind}'s files, but no figure verify compares in them")
    return run
