"""A compiled statement's positional arguments: the caller's values in the statement's
order, its own constants in their places unless the caller names them, the caller's
mapping neither copied nor changed (`storage/statements.py`)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects import sqlite

from cadence_store.storage import (
    append_statements,
    feed_statements,
    read_statements,
    run_statements,
)
from cadence_store.storage.statements import Query, Write, compile_statement

STATEMENTS = {
    f"{module.__name__.rsplit('.', 1)[-1]}.{name}": statement
    for module in (append_statements, feed_statements, read_statements, run_statements)
    for name, statement in vars(module).items()
    if isinstance(statement, Query | Write)
}
# statements made per shape on first use: each shape of the run ids' keyset pages
STATEMENTS.update(
    {
        f"run_statements.run_ids_statement(after={after}, limit={limit})": (
            run_statements.run_ids_statement(after, limit)
        )
        for after in (False, True)
        for limit in (False, True)
    }
)


def _merged(
    positions: tuple[str, ...], constants: dict[str, Any], params: dict[str, Any]
) -> tuple[Any, ...]:
    values = {**constants, **params}
    return tuple(values[name] for name in positions)


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_arguments_are_the_merged_values_in_order(name: str) -> None:
    compiled = compile_statement(STATEMENTS[name], sqlite.dialect())
    assert compiled.positions is not None
    callers = {p: f"value of {p}" for p in compiled.positions if p not in compiled.constants}
    overriding = {p: f"caller's {p}" for p in compiled.positions}
    for params in (callers, overriding):
        before = dict(params)
        assert compiled.arguments(params) == _merged(compiled.positions, compiled.constants, params)
        assert params == before


def test_some_statement_mixes_constants_and_values() -> None:
    """The case the picker exists for is exercised above."""
    mixed = [
        name
        for name, statement in STATEMENTS.items()
        if (compiled := compile_statement(statement, sqlite.dialect())).positions
        and any(p in compiled.constants for p in compiled.positions)
        and any(p not in compiled.constants for p in compiled.positions)
    ]
    assert "append_statements.UPSERT_RECEIPT" in mixed


@pytest.mark.parametrize(
    "name", ["ADVANCE_KNOWN", "ADVANCE_UNRECORDED", "INSERT_EVENT", "INSERT_RECEIPT"]
)
def test_the_appends_statements_pick_their_arguments_in_c(name: str) -> None:
    """A transition's three statements on SQLite bind no constants (they are written into
    the SQL), so their arguments are picked by `operator.itemgetter`, without a frame."""
    compiled = compile_statement(getattr(append_statements, name), sqlite.dialect())
    assert compiled.constants == {}
    assert type(compiled.arguments).__name__ == "itemgetter"
