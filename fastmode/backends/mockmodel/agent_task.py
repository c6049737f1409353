"""What a coding task asks for, read from the user's own words: which files, which command,
whether anything is to change, and which line an answer should quote.

A model acting for a coding agent reads "read README.md and tell me its first line" as: read
one file, answer with its first line, change nothing. The reading here is deliberately narrow:
a task it cannot read as one of these is answered in text, never with a guessed write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

READ, RUN, CHANGE, CREATE, NONE = "read", "run", "change", "create", "none"

# a path-like word: dirs/name.ext, or a well-known file name without an extension
_FILE = re.compile(
    r"(?<![\w/.@:-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7}"
    r"|(?:[\w.-]+/)*(?:Makefile|Dockerfile|LICENSE|README|Procfile|Gemfile|Rakefile))(?![\w/])")
_URL = re.compile(r"\b\w+://\S+")
_CHANGE = re.compile(
    r"\b(change|edit|fix|replace|rename|update|modify|append|insert|delete|remove|add|set|"
    r"rewrite|refactor|correct)\b", re.IGNORECASE)
_CREATE = re.compile(r"\b(create|write|make|generate)\b(?:\s+\w+){0,3}?\s+(?:new\s+)?"
                     r"(file|script|module)\b", re.IGNORECASE)
_RUN = re.compile(r"\b(run|execute|exec|invoke)\b", re.IGNORECASE)
_LIST = re.compile(r"\b(list|show)\b(?:\s+\w+){0,2}\s+(files|directory|folder|dir)\b",
                   re.IGNORECASE)
_BACKTICK = re.compile(r"`([^`\n]+)`")
_RUN_TAIL = re.compile(r"\b(?:run|execute)\s+(?:the\s+command\s+)?(.+?)(?:\s+and\s+|[.;?!]?$)",
                       re.IGNORECASE)
_NTH = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "last": -1}
_LINE = re.compile(r"\b(first|second|third|fourth|fifth|last)\s+line\b|\bline\s+(\d{1,6})\b",
                   re.IGNORECASE)
_COUNT_LINES = re.compile(r"\bhow many lines\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Task:
    kind: str  # READ | RUN | CHANGE | CREATE | NONE
    text: str  # the user's own words
    files: tuple[str, ...] = ()
    command: str = ""  # RUN: the command line to run
    line: int = 0  # the line an answer quotes: 1 the first, -1 the last, 0 none asked for
    count_lines: bool = False


def read_task(text: str) -> Task:
    """The task ``text`` sets (its kind decides which tool fits, if any)."""
    files = tuple(dict.fromkeys(m.rstrip(".,:;") for m in _FILE.findall(_URL.sub(" ", text))))
    line = _asked_line(text)
    counts = bool(_COUNT_LINES.search(text))
    quoted = [q for q in _BACKTICK.findall(text) if q not in files]
    if _RUN.search(text):
        command = quoted[0] if quoted else _run_tail(text)
        if command:
            return Task(RUN, text, files, command, line, counts)
    if files and _CREATE.search(text) and not _reads(text):
        return Task(CREATE, text, files[:1], "", line, counts)
    if files and _CHANGE.search(text):
        return Task(CHANGE, text, files, "", line, counts)
    if files:
        return Task(READ, text, files, "", line, counts)
    if _LIST.search(text):
        return Task(RUN, text, (), "ls", line, counts)
    return Task(NONE, text)


def asks_change(text: str) -> bool:
    """Whether ``text`` asks for anything to change or run (a file named or not)."""
    return bool(_CHANGE.search(text) or _RUN.search(text) or _CREATE.search(text))


def _asked_line(text: str) -> int:
    m = _LINE.search(text)
    if m is None:
        return 0
    return _NTH[m.group(1).lower()] if m.group(1) else int(m.group(2))


def _reads(text: str) -> bool:
    return re.search(r"\b(read|show|open|look at|what does)\b", text, re.IGNORECASE) is not None


def _run_tail(text: str) -> str:
    m = _RUN_TAIL.search(text)
    if m is None:
        return ""
    tail = m.group(1).strip().strip("'\"")
    if not tail or tail.lower().startswith(("the tests", "tests")):
        return "pytest -q" if tail else ""
    return tail
