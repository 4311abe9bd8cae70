"""Every Python example of the README and of docs/ runs as copied, in a fresh interpreter.

Each ```python block of README.md and docs/**/*.md is one script, run by a new Python
process in an empty directory, with nothing injected: the block brings its own imports,
models and engine. Two HTML comments just above a block change that, and say so to a
reader of the Markdown source:

- `<!-- example: continues -->`: the block goes on from the one before it on the page
  (that one, and whatever it continues, runs first in the same script);
- `<!-- example: postgresql -->`: the block needs PostgreSQL; it reads the server's URL
  from `$CADENCE_STORE_URL`, which the test sets to a fresh database of the test server
  (a reader sets it to theirs).

There is no way to skip a block: an example that cannot run is not an example.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^(?P<indent> *)```python\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
MARKER = re.compile(r"<!-- example: (?P<kind>continues|postgresql) -->\s*$")
EXAMPLE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Example:
    page: str  # path relative to the repository
    line: int  # where the block starts
    source: str  # this block, dedented
    script: str  # what runs: the blocks it continues, then this one
    postgresql: bool

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def _markers_above(text: str, start: int) -> set[str]:
    """The example markers on the lines right above the block starting at `start`."""
    kinds: set[str] = set()
    for line in reversed(text[:start].rstrip("\n").split("\n")[-3:]):
        found = MARKER.search(line.strip())
        if found is None:
            break
        kinds.add(found["kind"])
    return kinds


def page_examples(path: Path, root: Path = ROOT) -> list[Example]:
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(root).as_posix()
    examples: list[Example] = []
    for match in BLOCK.finditer(text):
        kinds = _markers_above(text, match.start())
        source = textwrap.dedent(match["body"])
        line = text.count("\n", 0, match.start()) + 1
        if "continues" in kinds:
            assert examples, f"{page}:{line} continues, but no block comes before it"
            before = examples[-1]
            script = f"{before.script}\n# --- {page}:{line}\n{source}"
            postgresql = before.postgresql or "postgresql" in kinds
        else:
            script, postgresql = source, "postgresql" in kinds
        examples.append(Example(page, line, source, script, postgresql))
    return examples


def documented_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def all_examples() -> list[Example]:
    return [example for page in documented_pages() for example in page_examples(page)]


# SQLite examples first: they need no server, and they are most of them.
EXAMPLES = sorted(all_examples(), key=lambda example: example.postgresql)


def run_example(example: Example, cwd: Path, url: str | None) -> None:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CADENCE_STORE_", "XDG_", "PYTEST_"))
    }
    environment["HOME"] = str(cwd)
    if url is not None:
        environment["CADENCE_STORE_URL"] = url
    script = cwd / "example.py"
    script.write_text(example.script, encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, (
        f"{example.name} failed as copied (exit {completed.returncode}):\n"
        f"{completed.stdout}\n{completed.stderr}"
    )


def test_the_documentation_has_runnable_examples() -> None:
    pages = {example.page for example in EXAMPLES}
    assert "README.md" in pages
    assert len(pages) >= 8, sorted(pages)
    assert len(EXAMPLES) >= 20


def test_a_marker_is_read_only_right_above_its_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\n<!-- example: continues -->\n```python\nassert x == 1\n```\n"
        "\n<!-- example: postgresql -->\n\ntext between\n\n```python\ny = 2\n```\n",
        encoding="utf-8",
    )
    first, second, third = page_examples(page, tmp_path)
    assert first.script == "x = 1\n"
    assert second.script.startswith("x = 1\n") and second.script.endswith("assert x == 1\n")
    assert (third.script, third.postgresql) == ("y = 2\n", False)


@pytest.mark.parametrize(
    "example",
    [
        pytest.param(example, id=example.name, marks=[pytest.mark.postgres])
        if example.postgresql
        else pytest.param(example, id=example.name)
        for example in EXAMPLES
    ],
)
def test_example_runs_as_copied(example: Example, tmp_path: Path, request: pytest.FixtureRequest):
    url = request.getfixturevalue("pg_database_url") if example.postgresql else None
    run_example(example, tmp_path, url)
