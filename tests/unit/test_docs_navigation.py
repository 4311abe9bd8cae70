"""Every page under docs/ is reachable from the site's navigation (mkdocs.yml `nav:`): a
page left out builds without a warning but no reader finds it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# a nav entry `- Title: path.md` (or a bare `- path.md`)
NAV_PAGE = re.compile(r"^\s*-\s+(?:[^:]+:\s+)?(?P<page>\S+\.md)\s*$")


def nav_pages() -> set[str]:
    lines = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").splitlines()
    start = lines.index("nav:")
    pages: set[str] = set()
    for line in lines[start + 1 :]:
        if line and not line[0].isspace():
            break  # the next top-level key
        match = NAV_PAGE.match(line)
        if match:
            pages.add(match["page"])
    return pages


def test_every_docs_page_is_in_the_navigation() -> None:
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    listed = nav_pages()
    assert not pages - listed, f"docs pages missing from mkdocs.yml nav: {sorted(pages - listed)}"
    assert not listed - pages, f"nav entries without a page: {sorted(listed - pages)}"
