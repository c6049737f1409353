"""The product speaks to its users: its docs, comments, config and tests say what fastmode does,
not how it was made. References to the project's own work items (an issue, a stop or a round
by its number) and the notes of a lab book (the Nth look) mean nothing to a user; another
project's issue is cited by its URL."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = re.compile(r"\b(?:stop|round|issue)s? #?[0-9]+\b"
                   r"|\b(?:second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) look\b",
                   re.IGNORECASE)
KINDS = ("*.md", "*.py", "*.toml", "*.yml", "*.yaml", "*.js", "*.html", "Makefile")


def test_no_words_about_how_the_project_was_made() -> None:
    files = subprocess.run(["git", "ls-files", "--", *KINDS], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(files) > 100  # the project's own files were listed
    found = [f"{name}:{n}: {line.strip()[:100]}"
             for name in files if (ROOT / name).is_file()
             for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
             if WORDS.search(line)]
    assert found == []


def test_the_check_finds_what_it_looks_for() -> None:
    n = " 34"  # joined here, so that this file holds no example itself
    for text in ("as measured in stop" + n, "Issue" + n + "'s refit", "round" + n,
                 "the ninth" + " look"):
        assert WORDS.search(text), text
    for text in ("https://github.com/vllm-project/vllm/issues/21348", "a round trip",
                 "stop_sequences", "the issue is"):
        assert not WORDS.search(text), text
