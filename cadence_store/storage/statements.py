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

import functools
import json
import operator
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import BindParameter, Connection, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from .dialects import profile_of

SchemaMap = tuple[tuple[str | None, str | None], ...]
Row = TypeVar("Row", bound=tuple[Any, ...])


@dataclass(frozen=True, eq=False, slots=True)
class Query(Generic[Row]):
    """A select and the type of its rows (a NamedTuple of `rows`, its columns by name)."""

    name: str  # for messages and tests
    build: Callable[[str], ClauseElement]  # dialect name -> Core statement
    row: Callable[..., Row]


@dataclass(frozen=True, eq=False, slots=True)
class Write:
    """An insert, update or upsert: it answers the count of rows written."""

    name: str
    build: Callable[[str], ClauseElement]


@dataclass(frozen=True, eq=False, slots=True)
class RowsWrite:
    """A write of many rows, each a mapping of `columns`' values: one statement over the
    rows as JSON (the parameter `rows`, `json_rows`) where the engine reads row sets
    (PostgreSQL), else the driver's `executemany` of a one-row statement
    (`Statements.write_rows`)."""

    name: str
    build: Callable[[str], ClauseElement]
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


# (dialect, driver, paramstyle, schema map) -> statement -> compiled statement
_cache: dict[tuple[str, str, str, SchemaMap], dict[Statement, CompiledStatement]] = {}
_cache_lock: Final = threading.Lock()


def _compiled_statements(
    dialect: Dialect, schema_map: SchemaMap
) -> dict[Statement, CompiledStatement]:
    """The statements compiled so far for one dialect and schema map (filled on use)."""
    key = (dialect.name, str(dialect.driver), str(dialect.paramstyle), schema_map)
    statements = _cache.get(key)
    if statements is None:
        with _cache_lock:
            statements = _cache.setdefault(key, {})
    return statements


def _compiled(dialect: Dialect, statement: Statement, schema_map: SchemaMap) -> CompiledStatement:
    statements = _compiled_statements(dialect, schema_map)
    cached = statements.get(statement)
    if cached is None:
        cached = statements[statement] = compile_statement(statement, dialect, schema_map)
    return cached


def _arguments_of(
    positions: tuple[str, ...] | None, constants: Mapping[str, Any]
) -> Callable[[Mapping[str, Any]], Any]:
    """The driver's arguments from a mapping of named values, the statement's own
    constants where the caller names none (as `{**constants, **params}` would), the
    caller's mapping never copied or changed (the append sends one mapping to three
    statements).

    Positional paramstyles get one function per statement, written out as a tuple display
    (`(values["run_id"], values.get("state", c1), ...)`): one call per statement, where
    composing getters cost a call per run of names (measured on the append)."""
    if positions is None:
        if not constants:
            return _as_given
        fixed = dict(constants)
        return lambda params: {**fixed, **params}
    if not constants and len(positions) > 1:
        # the tuple in C, with no Python frame (the append's statements take this way)
        return operator.itemgetter(*positions)
    defaults: dict[str, Any] = {}
    items: list[str] = []
    for name in positions:
        if name in constants:
            slot = f"c{len(defaults)}"
            defaults[slot] = constants[name]
            items.append(f"values.get({name!r}, {slot})")
        else:
            items.append(f"values[{name!r}]")
    # names are the compiled statement's bind names, written as string literals (repr):
    # nothing a caller passes reaches this source
    source = f"lambda values: ({', '.join(items)}{',' if len(items) == 1 else ''})"
    picked: Callable[[Mapping[str, Any]], tuple[Any, ...]] = eval(
        source, {"__builtins__": {}, **defaults}
    )
    return picked


def _as_given(params: Mapping[str, Any]) -> Mapping[str, Any]:
    return params


def compile_statement(
    statement: Statement, dialect: Dialect, schema_map: SchemaMap = ()
) -> CompiledStatement:
    options: dict[str, Any] = {}
    if schema_map:
        options = {"schema_translate_map": dict(schema_map), "render_schema_translate": True}
    compiled: Any = statement.build(dialect.name).compile(dialect=dialect, **options)
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

    __slots__ = ("_compiled", "_cursor", "_dialect", "_raw", "_schema_map", "profile", "writes")

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
        self.profile = profile_of(dialect)
        if schema is None:
            # named, never left to the connection's search_path: a pooled server connection
            # may carry another client's `SET search_path`
            schema = self.profile.default_schema
        self._schema_map: SchemaMap = () if schema is None else ((None, schema),)
        self._compiled = _compiled_statements(dialect, self._schema_map)
        self._raw = raw
        self._cursor = raw.cursor()
        self.writes = 0  # rows written so far (`journal_write` reads it)

    @property
    def dialect_name(self) -> str:
        return str(self._dialect.name)

    def immediate_transaction(self) -> tuple[Callable[[], object], Callable[[], object]]:
        """SQLite: what begins a transaction holding the write lock (see
        `engine.begin_immediate`) and what ends it, both statements on this cursor (its
        cached COMMIT: the driver's `commit()` prepares one anew every time, a few
        microseconds on cold caches). Partials, called without a Python frame."""
        execute = self._cursor.execute
        return functools.partial(execute, "BEGIN IMMEDIATE"), functools.partial(execute, "COMMIT")

    def _compiled_of(self, statement: Statement) -> CompiledStatement:
        return self._compiled.get(statement) or _compiled(
            self._dialect, statement, self._schema_map
        )

    def _run(self, statement: Statement, params: Mapping[str, Any]) -> Any:
        compiled = self._compiled.get(statement) or _compiled(
            self._dialect, statement, self._schema_map
        )
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
        # `_run` written out: three of these make a transition
        compiled = self._compiled.get(write) or _compiled(self._dialect, write, self._schema_map)
        cursor = self._cursor
        cursor.execute(compiled.text, compiled.arguments(params))
        count: int = cursor.rowcount
        if count > 0:
            self.writes += count
        return count

    def write_guarded(
        self, guard: Write, then: tuple[Write, ...], params: Mapping[str, Any]
    ) -> bool:
        """`guard`, and each of `then` only if it wrote exactly one row (an append's
        compare-and-set on the run's head, then its event and receipt): whether it did.
        One frame for all of them (see `write_from`)."""
        compiled = self._compiled
        cursor = self._cursor
        statement = compiled.get(guard) or _compiled(self._dialect, guard, self._schema_map)
        cursor.execute(statement.text, statement.arguments(params))
        if cursor.rowcount != 1:
            return False
        # counted as each one is written: a failure halfway left rows (`journal_write`)
        self.writes += 1
        for write in then:
            statement = compiled.get(write) or _compiled(self._dialect, write, self._schema_map)
            cursor.execute(statement.text, statement.arguments(params))
            count: int = cursor.rowcount
            if count > 0:
                self.writes += count
        return True

    def write_rows(self, write: RowsWrite, rows: Sequence[Mapping[str, Any]]) -> int:
        """`write` of every mapping in `rows`, sent at once: on PostgreSQL one statement
        over their JSON (one round trip, planned once), elsewhere `executemany` (sqlite3
        steps it in C)."""
        if not rows:
            return 0
        compiled = self._compiled_of(write)
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
                    compiled = self._compiled_of(query)
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
        statement = self._compiled_of(query)
        args = statement.arguments(params)
        cursor = self.profile.streaming_cursor(self._raw, bool(self._dialect.is_async))
        try:
            cursor.execute(statement.text, args)
            while rows := cursor.fetchmany(batch):
                yield rows
        finally:
            cursor.close()
