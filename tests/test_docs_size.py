"""The docs stay readable and connected: no page grows past what one sitting reads (25,600
bytes; split a page by topic instead), and every relative link in README.md and docs/ leads to
a file that exists, so moving a section to another page cannot leave a dead link behind.
Anchors are not checked: only the file a link names."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MAX_BYTES = 25_600
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def link_targets(text: str) -> list[str]:
    """The targets of the markdown links outside code, as written."""
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    return LINK.findall(prose)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    out = []
    for target in link_targets(page.read_text()):
        path = target.split("#", 1)[0]
        if not path or EXTERNAL.match(target):
            continue  # an anchor on the same page, or another site
        if not (page.parent / path).exists():
            out.append(f"{page.relative_to(root)}: {target}")
    return out


def test_every_doc_page_is_at_most_the_size_bound() -> None:
    found = pages()
    assert len(found) > 10  # the docs were found
    over = {str(p.relative_to(ROOT)): n for p in found if (n := p.stat().st_size) > MAX_BYTES}
    assert over == {}


def test_every_relative_link_names_an_existing_file() -> None:
    broken = [b for page in [ROOT / "README.md", *pages()] for b in broken_links(page)]
    assert broken == []


def test_the_link_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#there) [gone](missing.md) [web](https://example.com/x.md)\n"
                    "[here](#top) ![img](there.md \"title\") `[code](nope.md)`\n"
                    "```\n[fenced](nope.md)\n```\n")
    assert link_targets(page.read_text()) == [
        "there.md#there", "missing.md", "https://example.com/x.md", "#top", "there.md"]
    assert [b.rsplit(": ", 1)[1] for b in broken_links(page, tmp_path)] == ["missing.md"]

