"""``fastmode replay-check DIR``: every cassette entry validated, every problem listed.

Per line: the format (JSON, version, the entry's schema: ``format.Entry``), the recorded
request (valid for its protocol's schema, as a live one must be), and the response: a body or
an event stream that is well-formed for its protocol (``streams``: what an SDK needs to parse
it) and carries the response's id. Unlike loading for a replay, which stops at the first
problem, this reads everything and reports each problem with its file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fastmode.gateway.cassettes.matching import validated
from fastmode.gateway.cassettes.streams import read as transcript
from fastmode.gateway.errors import APIError
from fastmode.gateway.observe.exchange_format import files, read


@dataclass
class Report:
    files: int = 0
    entries: int = 0
    problems: list[str] = field(default_factory=list)  # "file:line: what"

    @property
    def ok(self) -> bool:
        return not self.problems


def check(directory: str | Path) -> Report:
    report = Report(files=len(files(directory)))
    for line in read(directory):
        report.entries += 1
        entry = line.entry
        if entry is None:
            report.problems.append(f"{line.where}: {line.error}")
            continue
        try:
            validated(entry.protocol, entry.request)
        except APIError as exc:
            report.problems.append(f"{line.where}: request: {exc.message}")
        tr = transcript(entry)
        what = "events" if entry.stream else "body"
        report.problems += [f"{line.where}: {what}: {p}" for p in tr.problems]
        if tr.job_id(entry.protocol) is None:
            report.problems.append(f"{line.where}: {what}: the response has no id")
    return report
