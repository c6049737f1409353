"""The server's tokenizer (``backends.tokenizer``) as a Hugging Face ``tokenizer.json``.

Load generators (aiperf, guidellm, inference-perf, vLLM's bench) and routers want a Hugging Face
tokenizer to count and cut text; with this one they count exactly as the server counts, offline.

How it stays exact: the server's tokenizer is a regular expression whose every match is a token,
so the Hugging Face one is a ``Split`` pre-tokenizer on the same expression (``Isolated``: each
match a piece) and a ``WordLevel`` model (each piece one id). The expression is rewritten for the
library's engine (Oniguruma) with its character classes spelt out as code-point ranges computed
from Python's own ``re`` (``\\w``, ``\\d``, ``\\s`` differ between engines in Unicode), so both
split every text at the same places. A piece missing from the vocabulary is still one token: the
unknown token, a space and U+FFFD, which is what it decodes to; that text is one token for the
server wherever it lands (after a letter, a symbol, a newline, at the start), so decoded ids
count as many tokens as there were ids. The vocabulary covers whitespace runs, ASCII punctuation, every number of one to three digits, short
ASCII letter runs, Latin, Greek and Cyrillic letters and the mock model's own words, each with
and without a leading space. ``Fuse`` decodes by concatenation: a text of known pieces comes back
exactly.
"""

from __future__ import annotations

import itertools
import json
import re
import string
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fastmode.backends.mockmodel import wordbank
from fastmode.backends.tokenizer import tokenize

UNK = " \ufffd"
_LETTER = re.compile(r"[^\W\d_]")
_DIGIT = re.compile(r"\d")
_SPACE = re.compile(r"\s")
_OTHER = re.compile(r"[^\w\s]|_")


def _ranges(pattern: re.Pattern[str]) -> str:
    """The code points a one-character pattern matches, as an Oniguruma class body."""
    out: list[str] = []
    start = prev = -2
    for cp in itertools.chain(range(0xD800), range(0xE000, sys.maxunicode + 1)):
        if not pattern.fullmatch(chr(cp)):
            continue
        if cp != prev + 1:
            if start >= 0:
                out.append(_span(start, prev))
            start = cp
        prev = cp
    if start >= 0:
        out.append(_span(start, prev))
    return "".join(out)


def _span(a: int, b: int) -> str:
    return f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}"


def pattern() -> str:
    """``backends.tokenizer``'s expression, with Python's classes spelt out."""
    letter, digit, space, other = (_ranges(p) for p in (_LETTER, _DIGIT, _SPACE, _OTHER))
    return (f" ?[{letter}]{{1,6}}"
            f"| ?[{digit}]{{1,3}}"
            f"| ?[{other}]"
            f"|[{space}]+(?= [^{space}])"
            f"|[{space}]+")


def _pieces() -> Iterator[str]:
    yield from (" " * n for n in range(1, 33))
    for ch in "\n\t":
        yield from (ch * n for n in range(1, 5))
    yield from ("\n" + " " * n for n in range(1, 33))
    yield from ("\r\n", "\n\n\n\n", " \n", "\t\t\t\t\t\t")
    for n in (1, 2, 3):
        yield from ("".join(d) for d in itertools.product(string.digits, repeat=n))
    yield from string.punctuation
    letters = string.ascii_letters
    yield from letters
    yield from ("".join(p) for p in itertools.product(letters, repeat=2))
    lower = string.ascii_lowercase
    for a, b, c in itertools.product(lower, repeat=3):
        yield a + b + c
        yield a.upper() + b + c
    for cp in itertools.chain(range(0xA0, 0x250), range(0x370, 0x400), range(0x400, 0x530)):
        if _LETTER.fullmatch(chr(cp)) or _OTHER.fullmatch(chr(cp)):
            yield chr(cp)
    for name in dir(wordbank):
        value = getattr(wordbank, name)
        if isinstance(value, tuple):
            for text in value:
                if isinstance(text, str):
                    yield from tokenize(text)


def vocabulary(extra: Iterable[str] = ()) -> dict[str, int]:
    """Piece -> id, the unknown token first; each piece also with a leading space."""
    vocab = {UNK: 0, UNK.strip(): 1}
    for piece in itertools.chain(_pieces(), extra):
        for p in (piece, " " + piece.lstrip(" ")) if piece.strip() else (piece,):
            if p not in vocab and tokenize(p) == [p]:  # only what the server takes for one
                vocab[p] = len(vocab)
    return vocab


def document(extra: Iterable[str] = ()) -> dict[str, Any]:
    """The ``tokenizer.json`` document (the ``tokenizers`` library's serialisation)."""
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": pattern()},
                          "behavior": "Isolated", "invert": False},
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocabulary(extra), "unk_token": UNK},
    }


CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "unk_token": UNK,
    "model_max_length": 1 << 30,
    "clean_up_tokenization_spaces": False,  # decoding gives the text back, spaces unchanged
    "add_bos_token": False, "add_eos_token": False,
}


def write(folder: Path, extra: Iterable[str] = ()) -> list[Path]:
    """``tokenizer.json`` and ``tokenizer_config.json`` in ``folder`` (made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / "tokenizer.json", folder / "tokenizer_config.json"]
    files[0].write_text(json.dumps(document(extra), ensure_ascii=False))
    files[1].write_text(json.dumps(CONFIG, ensure_ascii=False, indent=2) + "\n")
    return files
