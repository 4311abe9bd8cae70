"""Typed statements, compiled once per dialect, run on the DB-API cursor.

A statement is a module-level object: a `Query` (a select, with the type of its rows) or
a `Write` (an insert, update or upsert, answering a row count). Each is written as
SQLAlchemy Core against the models' tables (so it follows the schema and never formats
caller data into SQL: values are bound parameters), compiled once per (dialect, schema
map), and then executed on the raw DB-API cursor of the transaction's connection. That
skips SQLAlchemy's per-execution work (cache-key generation, result processing), which
was most of an append's cost; the statements themselves are unchanged.

The statements live beside the tables they touch: `run_statements` (heads, operations,
leases, bindings, verification), `append_statements`, `read_statements`.
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import BindParameter, Connection, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from .backends import Backend, backend_for

SchemaMap = tuple[tuple[str | None, str | None], ...]
Row = TypeVar("Row", bound=tuple[Any, ...])


@dataclass(frozen=True, eq=False, slots=True)
class Query(Generic[Row]):
    """A select and the type of its rows (a NamedTuple of `rows`, its columns by name)."""

    name: str  # for messages and tests
    build: Callable[[Backend], ClauseElement]  # the engine's backend -> Core statement
    row: Callable[..., Row]


@dataclass(frozen=True, eq=False, slots=True)
class Write:
    """An insert, update or upsert: it answers the count of rows written."""

    name: str
    build: Callable[[Backend], ClauseElement]


@dataclass(frozen=True, eq=False, slots=True)
class RowsWrite:
    """A write of many rows, each a mapping of `columns`' values: one statement over the
    rows as JSON (the parameter `rows`, `json_rows`) where the engine reads row sets
    (PostgreSQL), else the driver's `executemany` of a one-row statement
    (`Statements.write_rows`)."""

    name: str
    build: Callable[[Backend], ClauseElement]
    columns: tuple[str, ...]


Statement = Query[Any] | Write | RowsWrite


def json_rows(rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> str:
    """`rows` (their `fields`) as the JSON array of objects a row-set statement reads
    (a string decodes to the very characters it encoded)."""
    return json.dumps([{name: row[name] for name in fields} for row in rows])


def bound(*names: str) -> dict[str, BindParameter[Any]]:
    """Each named column's value as the bound parameter of the same name (for `values`)."""
    return {name: bindparam(name) for name in names}


@dataclass(frozen=True, slots=True)
class CompiledStatement:
    text: str
    positions: tuple[str, ...] | None  # parameter order for positional paramstyles
    constants: dict[str, Any]  # values the statement itself binds (e.g. state='committed')
    # the driver's arguments from a mapping of named values (`_arguments_of`)
    arguments: Callable[[Mapping[str, Any]], Any]


class _CompiledStatements(dict[Statement, CompiledStatement]):
    """The statements of one dialect and schema map, each compiled on its first use
    (`__missing__`): a statement already compiled is one dict lookup."""

    def __init__(self, dialect: Dialect, schema_map: SchemaMap) -> None:
        super().__init__()
        self.dialect = dialect
        self.schema_map = schema_map

    def __missing__(self, statement: Statement) -> CompiledStatement:
        # two threads may compile one statement at once: both get the same text
        compiled = self[statement] = compile_statement(statement, self.dialect, self.schema_map)
        return compiled


# (backend, driver, paramstyle, schema map) -> its compiled statements
_cache: dict[tuple[Backend, str, str, SchemaMap], _CompiledStatements] = {}
_cache_lock: Final = threading.Lock()


def _compiled_statements(
    dialect: Dialect, backend: Backend, schema_map: SchemaMap
) -> _CompiledStatements:
    """The statements compiled so far for one dialect and schema map (filled on use)."""
    key = (backend, str(dialect.driver), str(dialect.paramstyle), schema_map)
    statements = _cache.get(key)
    if statements is None:
        with _cache_lock:
            statements = _cache.setdefault(key, _CompiledStatements(dialect, schema_map))
    return statements


def _arguments_of(
    positions: tuple[str, ...] | None, constants: Mapping[str, Any]
) -> Callable[[Mapping[str, Any]], Any]:
    """The driver's arguments from a mapping of named values: `{**constants, **values}`
    (the statement's own constants where the caller names none), in the statement's
    order for positional paramstyles; the caller's mapping is never changed (the append
    sends one mapping to three statements)."""
    if positions is None:
        if not constants:
            return _as_given
        fixed = dict(constants)
        return lambda values: {**fixed, **values}
    pick = _tuple_of(positions)
    if not constants:
        # the append's statements take this way: the tuple picked in C, with no frame
        return pick
    fixed = dict(constants)
    return lambda values: pick({**fixed, **values})


def _tuple_of(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function of a mapping giving the tuple of its values of `names`, in order."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    # `itemgetter` of one name gives the value itself, not a tuple, and of none is no getter
    return lambda values: tuple([values[name] for name in names])


def _as_given(values: Mapping[str, Any]) -> Mapping[str, Any]:
    return values


def compile_statement(
    statement: Statement, dialect: Dialect, schema_map: SchemaMap = ()
) -> CompiledStatement:
    options: dict[str, Any] = {}
    if schema_map:
        options = {"schema_translate_map": dict(schema_map), "render_schema_translate": True}
    compiled: Any = statement.build(backend_for(dialect)).compile(dialect=dialect, **options)
    positions = tuple(compiled.positiontup or ()) if compiled.positional else None
    # binds that carry their own value (literals, `values(x=None)`), not caller parameters
    constants = {
        name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required
    }
    return CompiledStatement(
        compiled.string, positions, constants, _arguments_of(positions, constants)
    )


class _ObservedCursor:
    """The cursor API the statements use, run through the `Connection` (its cursor
    events fire) instead of on the DB-API cursor."""

    __slots__ = ("_connection", "_result")

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._result: Any = None

    def execute(self, text: str, arguments: Any = None) -> None:
        self._result = self._connection.exec_driver_sql(text, arguments)

    def fetchone(self) -> Any:
        return self._result.fetchone()

    def fetchall(self) -> Any:
        return self._result.fetchall()

    def executemany(self, text: str, arguments: Any) -> None:
        self._result = self._connection.exec_driver_sql(text, arguments)

    @property
    def rowcount(self) -> int:
        return int(self._result.rowcount)


class Statements:
    """Executes typed statements on one SQLAlchemy connection's DB-API cursor."""

    __slots__ = ("_compiled", "_cursor", "_dialect", "_raw", "profile", "writes")

    def __init__(self, connection: Connection, schema: str | None = None) -> None:
        """`schema`: where cadence-store's tables are (the connection's own statements,
        a host's, are not translated)."""
        raw = connection.connection.dbapi_connection
        assert raw is not None
        self._bind(connection.dialect, raw, schema)
        dispatch = connection.engine.dispatch
        if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
            # a host listens to the engine's statements: let it see the store's too
            self._cursor = _ObservedCursor(connection)

    @classmethod
    def on_dbapi(cls, dialect: Dialect, raw: Any, schema: str | None = None) -> Statements:
        """Statements on a DB-API connection checked out of the pool (no `Connection`)."""
        statements = cls.__new__(cls)
        statements._bind(dialect, raw, schema)
        return statements

    def _bind(self, dialect: Dialect, raw: Any, schema: str | None) -> None:
        self._dialect = dialect
        self.profile = backend_for(dialect)
        if schema is None:
            # named, never left to the connection's search_path: a pooled server connection
            # may carry another client's `SET search_path`
            schema = self.profile.default_schema
        schema_map: SchemaMap = () if schema is None else ((None, schema),)
        self._compiled = _compiled_statements(dialect, self.profile, schema_map)
        self._raw = raw
        self._cursor = raw.cursor()
        self.writes = 0  # rows written so far (`journal_write` reads it)

    @property
    def dialect_name(self) -> str:
        return self.profile.name

    def _run(self, statement: Statement, params: Mapping[str, Any]) -> Any:
        compiled = self._compiled[statement]
        self._cursor.execute(compiled.text, compiled.arguments(params))
        return self._cursor

    def one(self, query: Query[Row], **params: Any) -> Row | None:
        """The first row, as the query's row type (None: no row)."""
        return self.one_from(query, params)

    def one_from(self, query: Query[Row], params: Mapping[str, Any]) -> Row | None:
        """`one` with the values in a mapping (not copied: a hot path's one mapping
        serves several statements)."""
        found = self._run(query, params).fetchone()
        return None if found is None else query.row(*found)

    def all(self, query: Query[Row], **params: Any) -> list[Row]:
        row = query.row
        return [row(*found) for found in self._run(query, params).fetchall()]

    def raw_rows(self, query: Query[Row], **params: Any) -> list[tuple[Any, ...]]:
        """`all` as the driver's plain tuples, for a reader that takes many rows by
        position on purpose (a chain's events: a named row each costs verification time)."""
        rows: list[tuple[Any, ...]] = self._run(query, params).fetchall()
        return rows

    def write(self, write: Write, **params: Any) -> int:
        return self.write_from(write, params)

    def write_from(self, write: Write, params: Mapping[str, Any]) -> int:
        """`write` with the values in a mapping (see `one_from`)."""
        count: int = self._run(write, params).rowcount
        if count > 0:
            self.writes += count
        return count

    def write_guarded(
        self, guard: Write, then: tuple[Write, ...], params: Mapping[str, Any]
    ) -> bool:
        """`guard`, and each of `then` only if it wrote exactly one row (an append's
        compare-and-set on the run's head, then its event and receipt): whether it did."""
        if self._run(guard, params).rowcount != 1:
            return False
        # counted as each one is written: a failure halfway left rows (`journal_write`)
        self.writes += 1
        for write in then:
            self.write_from(write, params)
        return True

    def write_rows(self, write: RowsWrite, rows: Sequence[Mapping[str, Any]]) -> int:
        """`write` of every mapping in `rows`, sent at once: on PostgreSQL one statement
        over their JSON (one round trip, planned once), elsewhere `executemany` (sqlite3
        steps it in C)."""
        if not rows:
            return 0
        compiled = self._compiled[write]
        arguments = compiled.arguments
        if self.profile.binds_row_sets:
            self._cursor.execute(compiled.text, arguments({"rows": json_rows(rows, write.columns)}))
        else:
            self._cursor.executemany(compiled.text, [arguments(row) for row in rows])
        count: int = self._cursor.rowcount
        if count > 0:
            self.writes += count
        return count

    def stream(self, query: Query[Row], batch: int, **params: Any) -> Iterator[Row]:
        """Rows in batches of `batch`, never the whole result at once (a server-side
        cursor on PostgreSQL, whose client cursors would fetch everything)."""
        row = query.row
        for found in self.raw_stream(query, batch, **params):
            yield row(*found)

    def raw_stream(
        self, query: Query[Row], batch: int, **params: Any
    ) -> Generator[tuple[Any, ...]]:
        """`stream` as the driver's plain tuples (see `raw_rows`); closing the generator
        closes its cursor."""
        for rows in self.raw_pages(query, batch, **params):
            yield from rows

    def raw_rows_of_each(
        self, requests: Sequence[tuple[Query[Any], Mapping[str, Any]]]
    ) -> list[list[tuple[Any, ...]]]:
        """`raw_rows` of each (query, values), in order: sent together on PostgreSQL
        (psycopg's pipeline mode: one round trip for all of them), one by one elsewhere,
        and where a host listens to the engine's statements."""
        raw = self._raw
        # the driver says whether it pipelines (psycopg's sync connection does)
        if (
            not hasattr(raw, "pipeline")
            or self._dialect.is_async
            or isinstance(self._cursor, _ObservedCursor)
        ):
            return [self._run(query, params).fetchall() for query, params in requests]
        cursors = []
        try:
            with raw.pipeline():
                for query, params in requests:
                    compiled = self._compiled[query]
                    cursor = raw.cursor()
                    cursors.append(cursor)
                    cursor.execute(compiled.text, compiled.arguments(params))
            return [cursor.fetchall() for cursor in cursors]
        finally:
            for cursor in cursors:
                cursor.close()

    def raw_pages(
        self, query: Query[Row], batch: int, **params: Any
    ) -> Generator[list[tuple[Any, ...]]]:
        """`raw_stream` a batch at a time (a reader that chains them in C takes no
        generator step per row); closing the generator closes its cursor."""
        statement = self._compiled[query]
        args = statement.arguments(params)
        cursor = self.profile.streaming_cursor(self._raw, bool(self._dialect.is_async))
        try:
            cursor.execute(statement.text, args)
            while rows := cursor.fetchmany(batch):
                yield rows
        finally:
            cursor.close()
