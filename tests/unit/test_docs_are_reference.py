"""The documentation is reference: no page tells the history of the work."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# the changelog is rendered into the site too (docs/changelog.md includes it)
PAGES = [*sorted(DOCS.rglob("*.md")), ROOT / "CHANGELOG.md"]
# "issue 27", "(#12)", "the eighth session", "this round": the vocabulary of a work diary
HISTORY = re.compile(
    r"\bissues? #?\d+|\(#\d+\)|\b(first|second|third|fourth|fifth|sixth|seventh|eighth)"
    r" (session|round)\b|\b(this|last|previous|earlier) (round|session)\b",
    re.IGNORECASE,
)


def test_the_pages_are_found() -> None:
    assert DOCS / "performance.md" in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_page_tells_the_history_of_the_work(page: Path) -> None:
    found = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert found == []


def test_the_performance_page_is_a_reference_of_at_most_400_lines() -> None:
    text = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    for section in (
        "## Targets",
        "## Results of the last full run",
        "## Method",
        "## What the ratios mean",
        "## Known limits",
        "## Reproducing each figure",
    ):
        assert section in text
