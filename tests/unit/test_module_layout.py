"""The package's layout rules: modules of one job each, rows read by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cadence_store.storage.rows import ROW_TYPES
from cadence_store.storage.statements import STATEMENTS

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
    assert found == [], "rows read by position; use the statement's row type (sql_rows)"


def test_the_scan_finds_positional_indexing(tmp_path: Path) -> None:
    sample = tmp_path / "repository_sample.py"
    sample.write_text("a = row[1]\nb = row[1:]\nc = row.run_id\nd = timed[-1]\n")
    assert [hit.split(": ")[1] for hit in _positional_subscripts(sample)] == [
        "row[1]",
        "row[1:]",
        "timed[-1]",
    ]


@pytest.mark.parametrize("name", sorted(ROW_TYPES))
def test_each_row_type_has_its_statements_columns(name: str) -> None:
    statement = STATEMENTS[name]("sqlite")
    columns = list(statement.selected_columns)  # type: ignore[attr-defined]
    assert len(columns) == len(ROW_TYPES[name]._fields)  # type: ignore[attr-defined]


def test_every_select_statement_of_sql_py_has_a_row_type() -> None:
    # the read side (queries.py) adds, and types, statements of its own
    sql_source = "".join(
        (PACKAGE / name).read_text(encoding="utf-8")
        for name in ("storage/statements.py", "storage/append_statements.py")
    )
    untyped = [
        name
        for name, factory in STATEMENTS.items()
        if f'"{name}"' in sql_source
        and hasattr(factory("sqlite"), "selected_columns")
        and name not in ROW_TYPES
    ]
    assert untyped == []
