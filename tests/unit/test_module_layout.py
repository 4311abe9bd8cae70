"""The package's layout rules: modules of one job each, rows read by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cadence_store.journal.views import RunListing
from cadence_store.storage import (
    append_statements,
    batch_statements,
    feed_statements,
    read_statements,
    run_statements,
)
from cadence_store.storage.backends import BACKENDS, SQLITE
from cadence_store.storage.read_statements import listing_statement
from cadence_store.storage.rows import OperationRow, with_server_time
from cadence_store.storage.statements import Query, RowsWrite, Statement, Write

PACKAGE = Path(__file__).resolve().parents[2] / "cadence_store"
MAX_LINES = 500
REPOSITORY_MODULES = sorted((PACKAGE / "repository").glob("*.py"))
# Subscripts by position of something that is not a statement's row: a page of rows, the
# bytes of a digest.
NOT_ROWS = {
    ("reading.py", "page[-1]"),
    ("core.py", 'hashlib.sha256(text.encode("utf-8")).digest()[:8]'),
}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_module_is_over_the_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name}: {lines} lines, split it into modules of one job"


def _positional_subscripts(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Subscript):
            continue
        index = node.slice
        if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
            index = index.operand
        positional = isinstance(index, ast.Slice) or (
            isinstance(index, ast.Constant) and isinstance(index.value, int)
        )
        text = ast.get_source_segment(source, node) or ""
        if positional and (path.name, text) not in NOT_ROWS:
            found.append(f"{path.name}:{node.lineno}: {text}")
    return found


def test_repository_reads_rows_by_name() -> None:
    assert REPOSITORY_MODULES, "no repository modules found"
    found = [hit for path in REPOSITORY_MODULES for hit in _positional_subscripts(path)]
    assert found == [], "rows read by position; use the statement's row type (storage/rows.py)"


def test_the_scan_finds_positional_indexing(tmp_path: Path) -> None:
    sample = tmp_path / "repository_sample.py"
    sample.write_text("a = row[1]\nb = row[1:]\nc = row.run_id\nd = timed[-1]\n")
    assert [hit.split(": ")[1] for hit in _positional_subscripts(sample)] == [
        "row[1]",
        "row[1:]",
        "timed[-1]",
    ]


def _statements() -> dict[str, Statement]:
    found = {}
    for module in (
        run_statements,
        append_statements,
        read_statements,
        feed_statements,
        batch_statements,
    ):
        for name, value in vars(module).items():
            if isinstance(value, (Query, Write, RowsWrite)):
                found[f"{module.__name__.rsplit('.', 1)[1]}.{name}"] = value
    # statements made per shape on first use: each shape of the run ids' keyset pages
    for after in (False, True):
        for limit in (False, True):
            shape = f"run_statements.run_ids_statement(after={after}, limit={limit})"
            found[shape] = run_statements.run_ids_statement(after, limit)
    return found


STATEMENTS = _statements()


def test_the_statements_are_found() -> None:
    assert "run_statements.HEAD" in STATEMENTS and len(STATEMENTS) > 40


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_query_has_its_row_type_and_each_write_selects_nothing(name: str) -> None:
    statement = STATEMENTS[name]
    for backend in BACKENDS:
        built = statement.build(backend)
        if isinstance(statement, Query):
            columns = list(built.selected_columns)  # type: ignore[attr-defined]
            if statement.row is with_server_time:  # an operation row, then the server's clock
                fields = (*OperationRow._fields, "now")
            else:
                fields = statement.row._fields  # type: ignore[attr-defined]
            assert len(columns) == len(fields), f"{name}: {fields}"
        else:
            assert not getattr(built, "_returning", ()), f"{name} returns rows: make it a Query"


def test_a_listing_has_a_row_type() -> None:
    listing = listing_statement(RunListing(stages=("abel-design",), after="x", limit=5))
    columns = list(listing.build(SQLITE).selected_columns)  # type: ignore[attr-defined]
    assert len(columns) == len(listing.row._fields)  # type: ignore[attr-defined]
    assert listing is listing_statement(RunListing(stages=("abel-other",), after="y", limit=9))
    back = listing_statement(RunListing(after="x", limit=5), backwards=True)
    assert back is not listing_statement(RunListing(after="x", limit=5))
    assert back.row is listing.row
