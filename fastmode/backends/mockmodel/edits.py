"""The one edit a plain-language task asks for on a file: which lines change, and to what.

Coding agents that edit by text (aider's ``whole``, ``diff`` and ``udiff`` formats) send the
file and a task such as "change the first line of README.md to Hello" and apply whatever edit
block comes back. The mock model reads the task's common phrasings here and answers with a
real edit, so an agent run against it changes the file as asked. Quoted arguments ('…', "…",
`…`, “…”) are taken literally; unquoted ones run to the end of the sentence (a file named after
"in", "of" or "to" is not part of them).

An :class:`Edit` is one span of whole lines: every edit format can say that (a SEARCH/REPLACE
block, one unified-diff hunk, or the whole new file). The span grows by neighbouring lines until
it occurs once in the file, because agents apply a SEARCH block at its first match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastmode.backends.mockmodel.request import cue_text


@dataclass(frozen=True, slots=True)
class Edit:
    """Lines ``old`` (at character ``start`` of the file) become ``new``; ``text`` is the whole
    new file and ``summary`` says what changed, in a few words."""

    start: int
    old: str
    new: str
    text: str
    summary: str


_QUOTES = (("'", "'"), ('"', '"'), ("`", "`"), ("\u201c", "\u201d"), ("\u2018", "\u2019"))
_PATHLIKE = r"[\w.-]*[./][\w./-]*\w"  # a name with a dot or a slash: README.md, src/app.py
_END = r"\s*(?:[.!;](?:\s|$)|$)"  # the end of a sentence or of a line
_ORDINALS = {"first": 1, "top": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5,
             "last": -1, "bottom": -1, "final": -1}


def _arg(name: str, until: str) -> str:
    """A quoted literal, or unquoted text up to where ``until`` (a lookahead) matches."""
    alts = [f"{re.escape(o)}(?P<{name}{i}>[^\n{re.escape(c)}]+){re.escape(c)}"
            for i, (o, c) in enumerate(_QUOTES, 1)]
    alts.append(f"(?P<{name}0>[^\n]+?)(?={until})")
    return "(?:" + "|".join(alts) + ")"


def _value(m: re.Match[str], name: str) -> str:
    for i in range(1, len(_QUOTES) + 1):
        quoted = m.group(f"{name}{i}")
        if quoted is not None:
            return quoted
    return m.group(f"{name}0").strip()


def _patterns(path: str) -> dict[str, re.Pattern[str]]:
    """The task phrasings, most specific first (a path given is matched as a file name too)."""
    file = f"(?:{re.escape(path)}|{_PATHLIKE})" if path else _PATHLIKE
    in_file = rf"(?:\s+(?:in|of|to|from|inside)\s+(?:the\s+)?(?:file\s+)?{file})"
    tail = rf"{in_file}?{_END}"  # what may follow a sentence's last argument
    nth = r"(?:the\s+(?P<nth>first|second|third|fourth|fifth|top|last|bottom|final|\d+(?:st|nd|rd|th))\s+line|line\s+(?P<num>\d+))"  # noqa: E501
    where = r"(?:the\s+)?(?:very\s+)?(?P<where>end|bottom|top|start|beginning)"
    add_until = rf"\s+(?:to|at|in)\s+{where.replace('?P<where>', '')}|{in_file}|{_END}"
    to_ = r"\s+(?:to|as|into)\s+"
    with_ = rf"{in_file}?\s+(?:with|by)\s+"
    into = rf"{in_file}?\s+(?:to|into)\s+"
    sep = r"\s*(?:->|\u2192|=>|\s+to\s+|\s+with\s+|\s+should\s+be\s+|\s+as\s+)\s*"
    flags = re.IGNORECASE | re.MULTILINE
    return {
        "line": re.compile(
            rf"\b(?:change|replace|set|make|update|rewrite|edit)\s+{nth}{in_file}?\s+"
            rf"(?:to|with|into|so\s+(?:that\s+)?it\s+(?:reads|says))\s*:?\s*{_arg('b', tail)}",
            flags),
        "typo": re.compile(
            rf"\bfix\s+(?:the\s+|a\s+)?(?:typo|spelling(?:\s+mistake)?|misspelling)"
            rf"{in_file}?\s*:?\s*{_arg('a', sep)}{sep}{_arg('b', tail)}", flags),
        "rename": re.compile(
            r"\brename\s+(?:the\s+)?(?:(?:function|variable|class|method|constant|field|"
            rf"identifier|symbol)\s+)?{_arg('a', to_)}\s+(?:to|as|into)"
            rf"\s+{_arg('b', tail)}", flags),
        "delete": re.compile(
            rf"\b(?:delete|remove|drop)\s+(?:the\s+|every\s+|all\s+(?:the\s+)?)?"
            r"(?P<many>lines?)\s+(?:containing|with|that\s+contains?|that\s+says|saying|"
            rf"mentioning|matching|that\s+mentions)\s*:?\s*{_arg('a', tail)}", flags),
        "delete_nth": re.compile(rf"\b(?:delete|remove|drop)\s+{nth}{in_file}?{_END}", flags),
        "add": re.compile(
            r"\b(?P<verb>add|append|insert)\s+(?:a\s+|the\s+|one\s+)?(?:new\s+)?"
            r"(?P<line>line\s*(?:(?:saying|that\s+says|reading|with(?:\s+the\s+text)?)\s*)?:?"
            rf"\s*)?{_arg('a', add_until)}(?P<tail>\s+(?:to|at|in)\s+{where}"
            rf"(?:\s+of\s+(?:the\s+)?(?:file\s+)?{file})?|{in_file})?{_END}", flags),
        "replace": re.compile(
            r"\breplace\s+(?:all\s+(?:occurrences\s+of\s+)?|every\s+|each\s+)?"
            rf"{_arg('a', with_)}{in_file}?\s+(?:with|by)\s+"
            rf"{_arg('b', tail)}", flags),
        "change": re.compile(
            rf"\b(?:change|update|turn)\s+{_arg('a', into)}"
            rf"{in_file}?\s+(?:to|into)\s+{_arg('b', tail)}", flags),
    }


def requested_edit(task_text: str, file_text: str, path: str = "") -> Edit | None:
    """The edit ``task_text`` asks for on a file whose content is ``file_text`` (named
    ``path``, if known), or None when the task is none of the phrasings read here or does not
    apply to this file (the text to change is not in it, the line does not exist)."""
    task = cue_text(task_text)
    for kind, pattern in _patterns(path).items():
        for m in pattern.finditer(task):
            edit = _BUILDERS[kind](m, file_text)
            if edit is not None:
                return edit
    return None


def _line_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every line, its newline included."""
    spans, pos = [], 0
    for line in text.splitlines(keepends=True):
        spans.append((pos, pos + len(line)))
        pos += len(line)
    return spans


def _nth(m: re.Match[str], count: int) -> int | None:
    """The 0-based index of the line the match names, or None when the file has no such line."""
    word = (m.group("nth") or "").lower()
    number = _ORDINALS.get(word) or int(re.sub(r"\D", "", word or m.group("num") or "0") or 0)
    index = count - 1 if number == -1 else number - 1
    return index if 0 <= index < count else None


def _set_line(m: re.Match[str], text: str) -> Edit | None:
    spans = _line_spans(text)
    index = _nth(m, len(spans))
    if index is None:
        return None
    start, end = spans[index]
    body_end = end - 1 if text[start:end].endswith("\n") else end
    value = _value(m, "b")
    which = m.group("nth") or f"line {m.group('num')}"
    return _span_edit(text, [(start, body_end, value)], f"set the {which} line to {value!r}"
                      if m.group("nth") else f"set {which} to {value!r}")


def _substitute(a: str, b: str, text: str, words: bool, summary: str) -> Edit | None:
    if not a or a == b:
        return None
    bounded = words and re.fullmatch(r"\w(?:.*\w)?", a) is not None
    found = re.escape(a)
    pattern = re.compile(rf"(?<!\w){found}(?!\w)" if bounded else found)
    changes = [(hit.start(), hit.end(), b) for hit in pattern.finditer(text)]
    return _span_edit(text, changes, summary) if changes else None


def _typo(m: re.Match[str], text: str) -> Edit | None:
    a, b = _value(m, "a"), _value(m, "b")
    return _substitute(a, b, text, True, f"fix the typo {a!r} -> {b!r}")


def _rename(m: re.Match[str], text: str) -> Edit | None:
    a, b = _value(m, "a"), _value(m, "b")
    return _substitute(a, b, text, True, f"rename {a!r} to {b!r}")


def _replace(m: re.Match[str], text: str) -> Edit | None:
    a, b = _value(m, "a"), _value(m, "b")
    return _substitute(a, b, text, False, f"replace {a!r} with {b!r}")


def _delete(m: re.Match[str], text: str) -> Edit | None:
    a = _value(m, "a")
    hits = [(s, e, "") for s, e in _line_spans(text) if a and a in text[s:e]]
    if m.group("many").lower() == "line":
        hits = hits[:1]
    return _span_edit(text, hits, f"delete the line containing {a!r}") if hits else None


def _delete_nth(m: re.Match[str], text: str) -> Edit | None:
    spans = _line_spans(text)
    index = _nth(m, len(spans))
    if index is None:
        return None
    start, end = spans[index]
    which = m.group("nth") or m.group("num")
    return _span_edit(text, [(start, end, "")], f"delete the {which} line"
                      if m.group("nth") else f"delete line {which}")


def _add(m: re.Match[str], text: str) -> Edit | None:
    if m.group("verb").lower() != "append" and not (m.group("line") or m.group("tail")):
        return None  # "add a docstring to f()" is no line to add
    line = _value(m, "a")
    if not line:
        return None
    if (m.group("where") or "").lower() in ("top", "start", "beginning"):
        return _span_edit(text, [(0, 0, line + "\n")], f"add the line {line!r} at the top")
    end = len(text)
    insert = ("\n" if text and not text.endswith("\n") else "") + line + "\n"
    return _span_edit(text, [(end, end, insert)], f"add the line {line!r} at the end")


def _change(m: re.Match[str], text: str) -> Edit | None:
    a, b = _value(m, "a"), _value(m, "b")
    return _substitute(a, b, text, False, f"change {a!r} to {b!r}")


_BUILDERS = {"line": _set_line, "typo": _typo, "rename": _rename, "delete": _delete,
             "delete_nth": _delete_nth, "add": _add, "replace": _replace, "change": _change}


def _span_edit(text: str, changes: list[tuple[int, int, str]], summary: str) -> Edit | None:
    """One edit of whole lines making ``changes`` ((start, end, replacement), in order, not
    overlapping): the lines they touch, grown until that text is non-blank and occurs once."""
    new_text, pos = [], 0
    for start, end, replacement in changes:
        new_text.append(text[pos:start] + replacement)
        pos = end
    new = "".join(new_text) + text[pos:]
    if new == text:
        return None
    first, last = changes[0][0], changes[-1][1]
    lo = text.rfind("\n", 0, first) + 1
    hi = last if last > lo and text[last - 1] == "\n" else _line_end(text, last)
    while (not text[lo:hi].strip() or text.count(text[lo:hi]) > 1) and (lo, hi) != (0, len(text)):
        if lo > 0:
            lo = text.rfind("\n", 0, lo - 1) + 1
        if hi < len(text):
            hi = _line_end(text, hi)
    delta = len(new) - len(text)
    return Edit(lo, text[lo:hi], new[lo:hi + delta], new, summary)


def _line_end(text: str, pos: int) -> int:
    """The end of the line holding ``pos`` (after its newline), or the end of the text."""
    newline = text.find("\n", pos)
    return len(text) if newline < 0 else newline + 1
