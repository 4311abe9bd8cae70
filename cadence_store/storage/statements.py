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

import operator
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
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


Statement = Query[Any] | Write


def bound(*names: str) -> dict[str, BindParameter[Any]]:
    """Each named column's value as the bound parameter of the same name (for `values`)."""
    return {name: bindparam(name) for name in names}


@dataclass(frozen=True, slots=True)
class CompiledStatement:
    text: str
    positions: tuple[str, ...] | None  # parameter order for positional paramstyles
    constants: dict[str, Any]  # values the statement itself binds (e.g. state='committed')
    _pick: Callable[[Mapping[str, Any]], Any] | None = None  # positional arguments

    def arguments(self, params: Mapping[str, Any]) -> Any:
        if self._pick is not None:
            return self._pick(params)
        return {**self.constants, **params} if self.constants else params


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


Pick = Callable[[Mapping[str, Any]], tuple[Any, ...]]


def _getter(names: list[str]) -> Pick:
    if len(names) == 1:
        (only,) = names
        return lambda values: (values[only],)
    return operator.itemgetter(*names)


def _constants_getter(names: list[str], constants: Mapping[str, Any]) -> Pick:
    """The statement's own values, unless the caller names them (as `{**constants,
    **params}` would)."""
    if len(names) == 1:
        (only,) = names
        value = constants[only]
        return lambda values: (values.get(only, value),)
    pairs = [(name, constants[name]) for name in names]
    return lambda values: tuple([values.get(name, value) for name, value in pairs])


def _picker(positions: tuple[str, ...] | None, constants: Mapping[str, Any]) -> Pick | None:
    """The positional arguments' tuple from a mapping of named values, the statement's
    own constants in their places: the caller's mapping is never copied or merged (the
    append sends one mapping to three statements)."""
    if positions is None:
        return None
    # runs of caller values and of constants, in order
    runs: list[tuple[bool, list[str]]] = []
    for name in positions:
        constant = name in constants
        if not runs or runs[-1][0] != constant:
            runs.append((constant, []))
        runs[-1][1].append(name)
    parts = [
        _constants_getter(names, constants) if constant else _getter(names)
        for constant, names in runs
    ]
    if not parts:
        return lambda _values: ()
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        first, second = parts
        return lambda values: first(values) + second(values)
    if len(parts) == 3:
        first, second, third = parts
        return lambda values: first(values) + second(values) + third(values)
    chain = tuple(parts)

    def pick(values: Mapping[str, Any]) -> tuple[Any, ...]:
        picked: tuple[Any, ...] = ()
        for part in chain:
            picked += part(values)
        return picked

    return pick


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
    return CompiledStatement(compiled.string, positions, constants, _picker(positions, constants))


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

    def begin_immediate(self) -> None:
        """SQLite: begin a transaction holding the write lock (see `engine.begin_immediate`)."""
        self._cursor.execute("BEGIN IMMEDIATE")

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
        count: int = self._run(write, params).rowcount
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

    def raw_pages(
        self, query: Query[Row], batch: int, **params: Any
    ) -> Generator[list[tuple[Any, ...]]]:
        """`raw_stream` a batch at a time (a reader that chains them in C takes no
        generator step per row); closing the generator closes its cursor."""
        statement = _compiled(self._dialect, query, self._schema_map)
        args = statement.arguments(params)
        cursor = self.profile.streaming_cursor(self._raw, bool(self._dialect.is_async))
        try:
            cursor.execute(statement.text, args)
            while rows := cursor.fetchmany(batch):
                yield rows
        finally:
            cursor.close()
