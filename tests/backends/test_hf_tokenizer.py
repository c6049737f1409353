"""The exported Hugging Face tokenizer splits every text where the server's tokenizer does:
same pieces, so the same counts, in both directions (the library's count of a text is the
server's, and the text it decodes back is counted by the server as the library counted it)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from fastmode.backends import hf_tokenizer
from fastmode.backends.tokenizer import count_tokens, tokenize
from fastmode.cli import main

CORPUS = [
    "Hello, world! The tokenizer splits long words: internationalization.",
    "def f(x_1, y=None):\n    return {'a': [1, 2, 3]}  # comment\n\n\nclass A:\n\tpass\n",
    "SELECT id, name FROM users WHERE age >= 31 AND city = 'Lyon';",
    "Numbers: 3.14159, 1,000,000, 0x1F, -42, 2026-12-02T08:14:56Z, 123456789012",
    "whitespace   runs\t\tand\n\n  \n indents    \r\n\u00a0non-breaking\u2003em space",
    "Ünïcödé: naïve café, Straße, Ελληνικά, русский, 北京市, 日本語のテキスト, 한국어",
    "emoji 😀👍🏽 and symbols © ® ™ € £ ¥ ² ³ ½ Ⅻ ٣ ५ — “quotes” «guillemets»",
    "[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]",
    '{"setup": "Why?", "punchline": "Because.", "confidence": 0.9}',
    "a  b   c    d", " leading and trailing ", "\n", "", "x" * 40, "9" * 10,
    "__init__ __name__ snake_case CamelCaseWordsThatAreLong",
]


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    folder = tmp_path_factory.mktemp("tok")
    assert main(["tokenizer", str(folder)]) == 0
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def _pieces(tok: Tokenizer, text: str) -> list[str]:
    return [text[a:b] for a, b in tok.encode(text, add_special_tokens=False).offsets]


def _random_texts(n: int) -> list[str]:
    """Seeded texts mixing letters, digits, spaces and symbols of many scripts."""
    rng = random.Random(44)
    alphabet = ("abcXYZ éßΩж北😀 \t\n\u00a0\u2003 0123٣५ _-.,;:!?'\"()[]{}<>/\\|@#$%^&*+=~`"
                "²½Ⅻ\u0301\u200b")
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(n)]


def test_the_corpus_counts_as_the_server_counts(tok: Tokenizer) -> None:
    for text in CORPUS + _random_texts(2000):
        assert _pieces(tok, text) == tokenize(text), repr(text)
        assert len(tok.encode(text, add_special_tokens=False).ids) == count_tokens(text)


def test_decoded_text_counts_as_the_library_counted(tok: Tokenizer) -> None:
    """The other direction: ids -> text -> the server's count. Known pieces decode exactly;
    an unknown one decodes to a space and U+FFFD, one token for the server wherever it is."""
    for text in CORPUS + _random_texts(500):
        ids = tok.encode(text, add_special_tokens=False).ids
        back = tok.decode(ids)
        assert count_tokens(back) == len(ids), (text, back)
        if 0 not in ids:
            assert back == text


def test_every_character_is_classed_as_the_server_classes_it(tok: Tokenizer) -> None:
    """Each code point of the Basic Multilingual Plane, alone, doubled, after a space and
    between letters and digits: the character classes agree with Python's ``re``."""
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000]
    texts = [f"{c}{c} {c}a{c}1{c}  {c}" for c in chars]
    for text, enc in zip(texts, tok.encode_batch(texts, add_special_tokens=False), strict=True):
        assert [text[a:b] for a, b in enc.offsets] == tokenize(text), repr(text)


def test_the_vocabulary_holds_only_whole_tokens() -> None:
    vocab = hf_tokenizer.vocabulary()
    assert vocab[hf_tokenizer.UNK] == 0 and len(set(vocab.values())) == len(vocab)
    assert all(tokenize(p) == [p] for p in vocab)
    assert {" the", "123", " 007", "\n    ", "{"} <= vocab.keys()


def test_a_file_in_the_way_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["tokenizer", str(f)]) == 2


def test_astral_code_points_are_classed_too(tok: Tokenizer) -> None:
    """Outside the BMP (emoji, historic scripts, CJK extensions, math letters): a sample."""
    texts = [f"{chr(c)}{chr(c)} {chr(c)}a1" for c in range(0x10000, sys.maxunicode, 97)]
    for text, enc in zip(texts, tok.encode_batch(texts, add_special_tokens=False), strict=True):
        assert [text[a:b] for a, b in enc.offsets] == tokenize(text), repr(text)
